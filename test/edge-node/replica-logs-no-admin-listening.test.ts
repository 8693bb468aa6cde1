// `zenova-node serve --replicas K --admin-listen …`: only the supervisor listens on the admin port,
// so only it logs "admin listening", with the port it bound. A replica answers the supervisor's
// scrapes over IPC and binds nothing: a line from it would name a port nobody listens on
// (127.0.0.1:0 when asked for any port), and a tool waiting for the line could take that one.
import t from 'tap';
import { logs, replicaScene, serveTwoReplicas } from './replica-serve.js';

t.test('with replicas only the supervisor logs "admin listening", with the port it bound', async (t) => {
  const node = await serveTwoReplicas(t, (await replicaScene(t)).stateDir);
  const lines = logs(node).filter((l) => l.msg === 'admin listening');
  t.equal(lines.length, 1, 'one line, not one per process');
  t.equal(lines[0]?.replica, undefined, "the supervisor's");
  const url = new URL(String(lines[0]?.url));
  t.not(url.port, '0', 'the port it bound, not the one asked for');
  const res = await fetch(`${url.origin}/metrics`);
  t.equal(res.status, 200, 'and the admin port answers there');
  t.match(await res.text(), /zenova_node_replica_up\{replica="1"\} 1/);
  t.equal(await node.stop('SIGTERM', 40_000), 0);
});
