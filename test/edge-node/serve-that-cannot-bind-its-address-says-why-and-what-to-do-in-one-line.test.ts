/**
 * `zenova-node serve` that cannot bind its callers' port (in use, an IP that is not this host's, a
 * name that does not resolve) or its admin port (also under --replicas) says so in one
 * `zenova-node: …` line on stderr — the address, the cause in words with its code, what to do, in
 * the installer's words (NODE-PORT-IN-USE / NODE-LISTEN-UNAVAILABLE) — and exits 1; its log line
 * keeps the code and message but no stack. Real child processes, a real busy port.
 */
import { writeFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import { closedPort } from '../fixtures/loopback-server.js';
import { listenFailure } from '../../edge-node/src/cli/serve.js';
import { testConfig } from './node-harness.js';
import { replicaScene } from './replica-serve.js';

interface Refused {
  code: number | null;
  /** Its own lines (`zenova-node: …`). */
  said: string[];
  logs: Array<Record<string, unknown>>;
  output: string;
}

async function busyPort(t: Test): Promise<number> {
  const busy = net.createServer();
  await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => busy.close(() => resolve())));
  return (busy.address() as net.AddressInfo).port;
}

async function configFile(t: Test): Promise<string> {
  const file = path.join(t.testdir(), 'node.json');
  await writeFile(file, JSON.stringify(testConfig(`http://127.0.0.1:${await closedPort()}`)));
  return file;
}

async function serveRefused(t: Test, args: string[]): Promise<Refused> {
  const entry = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({ name: 'zenova-node serve', command: entry.command, args: [...entry.args, 'serve', ...args], t });
  const exit = await proc.exited;
  const output = proc.output();
  return { code: exit.code, said: output.split('\n').filter((l) => l.startsWith('zenova-node: ')), logs: parseJsonLines(output), output };
}

function checkLog(t: Test, refused: Refused, msg: string, code: RegExp): void {
  const line = refused.logs.find((l) => l.msg === msg);
  t.ok(line, `the log says "${msg}"`);
  const err = line?.err as { code?: string; reason?: string; stack?: string } | undefined;
  t.match(err?.code, code, 'the log keeps the code');
  t.type(err?.reason, 'string', 'and the message');
  t.equal(err?.stack, undefined, 'but no stack');
  t.notMatch(refused.output, /\n\s+at /, 'no stack anywhere');
  t.notMatch(refused.output, /unexpected failure/);
}

t.test('--listen on a port in use: one stderr line naming the address, EADDRINUSE in words, and what to do; exit 1', async (t) => {
  const port = await busyPort(t);
  const refused = await serveRefused(t, ['--config', await configFile(t), '--listen', `127.0.0.1:${port}`]);
  t.equal(refused.code, 1, refused.output);
  t.same(refused.said, [
    `zenova-node: cannot listen on 127.0.0.1:${port} (--listen): the port is already in use by another program (EADDRINUSE); stop the program using it, or pass --listen HOST:PORT with a free port`,
  ]);
  checkLog(t, refused, 'node-edge could not listen', /^EADDRINUSE$/);
});

t.test('--listen on an IP that is not this host\'s: EADDRNOTAVAIL in words and to pass an address of this host; exit 1', async (t) => {
  const refused = await serveRefused(t, ['--config', await configFile(t), '--listen', '10.255.255.1:7480']);
  t.equal(refused.code, 1, refused.output);
  t.same(refused.said, [
    "zenova-node: cannot listen on 10.255.255.1:7480 (--listen): the address is not one of this host's (EADDRNOTAVAIL); " +
      'pass --listen with an address of this host (or 0.0.0.0 for all of them) and a free port, e.g. --listen 0.0.0.0:7480',
  ]);
  checkLog(t, refused, 'node-edge could not listen', /^EADDRNOTAVAIL$/);
});

t.test('--listen on a name that does not resolve: says so with its code; exit 1', async (t) => {
  const refused = await serveRefused(t, ['--config', await configFile(t), '--listen', 'no-such-host.invalid:7480']);
  t.equal(refused.code, 1, refused.output);
  t.equal(refused.said.length, 1, refused.output);
  // ENOTFOUND, or EAI_AGAIN on a host whose DNS does not answer.
  t.match(refused.said[0], /^zenova-node: cannot listen on no-such-host\.invalid:7480 \(--listen\): the name (does not resolve \(ENOTFOUND\)|could not be resolved \(DNS did not answer\) \(EAI_AGAIN\)); pass --listen with an address of this host/);
  checkLog(t, refused, 'node-edge could not listen', /^(ENOTFOUND|EAI_AGAIN)$/);
});

t.test('--admin-listen on a port in use: the same one line naming --admin-listen; exit 1', async (t) => {
  const port = await busyPort(t);
  const refused = await serveRefused(t, ['--config', await configFile(t), '--listen', '127.0.0.1:0', '--admin-listen', `127.0.0.1:${port}`]);
  t.equal(refused.code, 1, refused.output);
  t.same(refused.said, [
    `zenova-node: cannot listen on 127.0.0.1:${port} (--admin-listen): the port is already in use by another program (EADDRINUSE); stop the program using it, or pass --admin-listen HOST:PORT with a free port`,
  ]);
  checkLog(t, refused, 'node-edge could not listen on its admin port', /^EADDRINUSE$/);
});

t.test('--replicas 2 with --admin-listen on a port in use: the supervisor says it in the same one line; exit 1', async (t) => {
  const port = await busyPort(t);
  // The supervisor checks the state dir as serve does, then binds its admin port before any replica starts.
  const { stateDir } = await replicaScene(t);
  const refused = await serveRefused(t, ['--state-dir', stateDir, '--replicas', '2', '--listen', '127.0.0.1:0', '--admin-listen', `127.0.0.1:${port}`]);
  t.equal(refused.code, 1, refused.output);
  t.same(refused.said, [
    `zenova-node: cannot listen on 127.0.0.1:${port} (--admin-listen): the port is already in use by another program (EADDRINUSE); stop the program using it, or pass --admin-listen HOST:PORT with a free port`,
  ]);
  checkLog(t, refused, 'node-edge could not listen on its admin port', /^EADDRINUSE$/);
});

t.test("a replica's bind failure (a cluster worker gets the primary's, syscall bind) is a listen failure in the same words", async (t) => {
  // What Node's cluster gives a worker whose shared handle the primary could not bind.
  const err = Object.assign(new Error('bind EADDRINUSE 127.0.0.1:7480'), { code: 'EADDRINUSE', errno: -98, syscall: 'bind', address: '127.0.0.1', port: 7480 });
  const failed = listenFailure(err, '--listen', { host: '127.0.0.1', port: 7480 });
  t.equal(
    failed?.message,
    'cannot listen on 127.0.0.1:7480 (--listen): the port is already in use by another program (EADDRINUSE); stop the program using it, or pass --listen HOST:PORT with a free port',
  );
  t.equal(listenFailure(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET', syscall: 'read' }), '--listen', { host: '127.0.0.1', port: 7480 }), undefined, 'another failure is not one');
});
