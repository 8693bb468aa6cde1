/**
 * node-edge's systemd notifications: READY=1 with STATUS= and MAINPID=, and STOPPING=1, really
 * arrive as datagrams on $NOTIFY_SOCKET (a python3 receiver stands in for systemd); without
 * NOTIFY_SOCKET nothing is sent; a failing helper is logged, never thrown.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { createLogger } from '../../edge-node/src/logger.js';
import { sendNotification } from '../../edge-node/src/service/sd-notify.js';
import { startProcess } from '../fixtures/processes.js';
import { tempDir } from '../e2e/stack.js';

const RECEIVER = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("bound", flush=True)
while True:
    print("got " + s.recv(4096).decode().replace("\\n", "|"), flush=True)
`;

const hasTools = spawnSync('python3', ['--version']).status === 0 && spawnSync('systemd-notify', ['--version']).status === 0;

t.test('READY=1 and STOPPING=1 reach the notify socket', { skip: hasTools ? false : 'python3 or systemd-notify missing on this machine: NOT TESTED' }, async (t) => {
  const dir = tempDir(t, 'zn-notify-');
  const socket = join(dir, 'notify.sock');
  const receiver = await startProcess({ name: 'notify receiver', command: 'python3', args: ['-c', RECEIVER, socket], readyLine: /^bound$/, t });
  const logger = createLogger({ level: 'silent' });
  const env = { ...process.env, NOTIFY_SOCKET: socket };
  await sendNotification(logger, 'ready', { status: 'serving on http://127.0.0.1:7480\nsecond line', env });
  const ready = await receiver.waitForLine(/^got /);
  t.match(ready, /READY=1/);
  t.match(ready, /STATUS=serving on http:\/\/127\.0\.0\.1:7480 second line/, 'the status is one line');
  t.match(ready, new RegExp(`MAINPID=${process.pid}`));
  await sendNotification(logger, 'stopping', { env });
  await receiver.waitForLine(/STOPPING=1/);
  t.pass('STOPPING=1 arrived');
});

t.test('without NOTIFY_SOCKET nothing is sent, and a failing helper is logged, not thrown', async (t) => {
  const sent: string[][] = [];
  const logger = createLogger({ level: 'silent' });
  await sendNotification(logger, 'ready', { status: 'x', env: {}, sender: async (args) => void sent.push(args) });
  t.same(sent, []);
  const lines: string[] = [];
  const loud = createLogger({ level: 'error', destination: { write: (l: string) => void lines.push(l) } });
  await sendNotification(loud, 'ready', { status: 'x', env: { NOTIFY_SOCKET: '/nonexistent/sock' }, sender: async () => { throw new Error('boom'); } });
  t.match(lines.join(''), /could not notify systemd/);
});
