/**
 * `zenova-node serve --replicas K` whose `--listen` cannot be bound (a port in use): every replica
 * meets the same failure, but the operator is told once — one `zenova-node: cannot listen on …`
 * line on stderr, in the words a lone node uses, one `node-edge could not listen` log line (code and
 * message, no stack) — with no line about replicas exiting; the supervisor stops the others and
 * exits 1, as a lone node does. Real child processes, a real busy port, an enrolled state dir.
 */
import net from 'node:net';
import t from 'tap';
import type { Test } from 'tap';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import { replicaScene } from './replica-serve.js';

async function busyPort(t: Test): Promise<number> {
  const busy = net.createServer();
  await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => busy.close(() => resolve())));
  return (busy.address() as net.AddressInfo).port;
}

t.test('--replicas 2 with --listen on a port in use: one stderr line, one log line, exit 1', async (t) => {
  const scene = await replicaScene(t);
  const port = await busyPort(t);
  const { command, args } = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({
    name: 'zenova-node serve --replicas 2',
    command,
    args: [...args, 'serve', '--state-dir', scene.stateDir, '--listen', `127.0.0.1:${port}`, '--replicas', '2'],
    env: { ZENOVA_NODE_REPLICAS: undefined, ZENOVA_LOG_LEVEL: undefined, ZENOVA_NODE_RECONNECT_BASE_MS: '100', ZENOVA_NODE_RECONNECT_MAX_MS: '500' },
    timeoutMs: 90_000,
    t,
  });
  const exit = await proc.exited;
  const output = proc.output();
  t.equal(exit.code, 1, output);
  t.same(
    output.split('\n').filter((l) => l.startsWith('zenova-node: ')),
    [
      `zenova-node: cannot listen on 127.0.0.1:${port} (--listen): the port is already in use by another program (EADDRINUSE); stop the program using it, or pass --listen HOST:PORT with a free port`,
    ],
    'the listen failure is said once on stderr',
  );
  const logs = parseJsonLines(output);
  const failures = logs.filter((l) => l.msg === 'node-edge could not listen');
  t.equal(failures.length, 1, 'and logged once');
  const err = failures[0]?.err as { code?: string; reason?: string; stack?: string } | undefined;
  t.equal(err?.code, 'EADDRINUSE', 'the log keeps the code');
  t.type(err?.reason, 'string', 'and the message');
  t.equal(err?.stack, undefined, 'but no stack');
  t.notMatch(output, /\n\s+at /, 'no stack anywhere');
  t.same(
    logs.filter((l) => typeof l.msg === 'string' && /exited|stopped with|could not start/.test(l.msg)).map((l) => l.msg),
    [],
    'no line about replicas exiting: the listen failure says why the node stopped',
  );
  const stopping = logs.filter((l) => typeof l.msg === 'string' && l.msg.startsWith('node-edge stopping: '));
  t.same(stopping.map((l) => l.msg), ['node-edge stopping: a replica could not listen'], 'the supervisor stops the others, saying why once');
});

t.test('a replica under an older supervisor, which ignores the report, says the listen failure itself', async (t) => {
  const scene = await replicaScene(t);
  const port = await busyPort(t);
  const { command, args } = tsEntry('test/edge-node/older-replica-supervisor.ts');
  const proc = await startProcess({
    name: 'an older supervisor with one replica',
    command,
    args: [...args, 'serve', '--state-dir', scene.stateDir, '--listen', `127.0.0.1:${port}`],
    env: { ZENOVA_NODE_REPLICAS: undefined, ZENOVA_LOG_LEVEL: undefined, ZENOVA_NODE_RECONNECT_BASE_MS: '100', ZENOVA_NODE_RECONNECT_MAX_MS: '500' },
    timeoutMs: 90_000,
    t,
  });
  await proc.exited;
  const output = proc.output();
  t.match(output, /older supervisor: the replica exited [1-9]/, 'the replica exits with an error');
  t.same(
    output.split('\n').filter((l) => l.startsWith('zenova-node: ')),
    [
      `zenova-node: cannot listen on 127.0.0.1:${port} (--listen): the port is already in use by another program (EADDRINUSE); stop the program using it, or pass --listen HOST:PORT with a free port`,
    ],
    'the replica says the listen failure on stderr, since its supervisor will not',
  );
  const failures = parseJsonLines(output).filter((l) => l.msg === 'node-edge could not listen');
  t.equal(failures.length, 1, 'and logs it once');
  t.equal(failures[0]?.replica, 1, 'naming the replica');
});
