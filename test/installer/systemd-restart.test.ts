// The real ServiceManager's restart (installer/src/host/systemd-service-manager.ts) against a
// stand-in `systemctl` on PATH that queues a --no-block job as systemd does: the job runs after
// systemctl returned. restart() resolves only once systemd started a new invocation of the unit,
// so the readiness wait after it cannot be answered by the old process, still running until
// systemd stops it (an upgrade was reported ready on the release it replaced).
import { spawn } from 'node:child_process';
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { systemdServiceManager } from '../../installer/src/host/systemd-service-manager.js';
import { isProcessAlive } from '../../edge-node/src/process-alive.js';

t.test('restart resolves once the old process is gone and a new invocation began, not when the job is queued', async (t) => {
  const dir = t.testdir({});
  const old = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  t.teardown(() => {
    if (isProcessAlive(old.pid!)) old.kill('SIGKILL');
  });
  const invocationFile = path.join(dir, 'invocation');
  writeFileSync(invocationFile, 'first\n');
  const calls = path.join(dir, 'calls');
  writeFileSync(calls, '');
  // The queued job stops the old process half a second later, then starts a new invocation.
  writeFileSync(path.join(dir, 'systemctl'), `#!/bin/sh
echo "$*" >> ${calls}
case " $* " in
  *" show "*) cat ${invocationFile} ;;
  *" restart --no-block "*) ( sleep 0.5; kill ${old.pid}; while kill -0 ${old.pid} 2>/dev/null; do sleep 0.05; done; echo second > ${invocationFile} ) >/dev/null 2>&1 & ;;
esac
exit 0
`);
  chmodSync(path.join(dir, 'systemctl'), 0o755);
  const pathBefore = process.env.PATH;
  process.env.PATH = `${dir}:${pathBefore ?? ''}`;
  t.teardown(() => {
    process.env.PATH = pathBefore;
  });
  await systemdServiceManager(dir).restart('node-edge.service');
  t.notOk(isProcessAlive(old.pid!), 'the old process is stopped when restart resolves');
  t.equal(readFileSync(invocationFile, 'utf8').trim(), 'second');
  t.match(readFileSync(calls, 'utf8'), /^show -p InvocationID --value node-edge\.service\nrestart --no-block node-edge\.service\n/, 'one restart job, queued');
});
