/**
 * Files named by options and settings (ZENOVA_CA_FILE, `gateway-node create --ca-file`,
 * `--env-file`, `install node --package`) are read only when they are regular files: a device
 * (/dev/zero, whose size reads 0) was read until memory ran out, and a FIFO with no writer blocked
 * for ever. The CLI runs as its own process, each with a deadline, so a command that blocks (or
 * reads on and on) fails the test instead of hanging it; no control plane is needed (the refusal
 * comes before any request).
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyPackage } from '../../installer/src/package/package-verifier.js';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import { releaseKeys } from './package-builder.js';

const work = mkdtempSync(join(tmpdir(), 'zn-option-files-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const fifo = join(work, 'named.fifo');
execFileSync('mkfifo', [fifo]);
/** A command that refuses the file answers within seconds; one still running then is blocked or reading on. */
const DEADLINE_MS = 30_000;

/** The test runner's own ZENOVA_* variables must not reach the CLI. */
const NO_ZENOVA_ENV: NodeJS.ProcessEnv = Object.fromEntries(Object.keys(process.env).filter((k) => k.startsWith('ZENOVA_')).map((k) => [k, undefined]));
const CONNECTION = { ZENOVA_CONTROL_PLANE_URL: 'http://127.0.0.1:1', ZENOVA_ADMIN_TOKEN: 'test-admin-token-0123456789abcdef' };

async function zenovaWithin(t: { teardown(fn: () => unknown): void }, argv: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; output: string }> {
  const entry = tsEntry('installer/src/cli.ts');
  // `--` before the script, as the packaged launcher has it: else Node takes `--env-file F` as its own.
  const args = [...entry.args.slice(0, -1), '--', ...entry.args.slice(-1), ...argv];
  const proc = await startProcess({ name: 'zenova', command: entry.command, args, env: { ...NO_ZENOVA_ENV, ...env }, cwd: work, t });
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), DEADLINE_MS);
  });
  const outcome = await Promise.race([proc.exited, late]);
  clearTimeout(timer);
  if (outcome === 'late') {
    await proc.stop('SIGKILL', 5_000);
    return { code: null, output: `${proc.output()}\n[still running after ${DEADLINE_MS} ms: killed]` };
  }
  return { code: outcome.code, output: proc.output() };
}

const CASES: Array<{ what: string; argv: string[]; env: NodeJS.ProcessEnv; message: RegExp }> = [
  {
    what: 'ZENOVA_CA_FILE=/dev/zero for gateway-node list',
    argv: ['gateway-node', 'list'],
    env: { ...CONNECTION, ZENOVA_CA_FILE: '/dev/zero' },
    message: /^zenova: ZENOVA_CA_FILE \/dev\/zero \(from the environment\) is not a regular file \(it is a character device\); expected a PEM certificate$/m,
  },
  {
    what: 'ZENOVA_CA_FILE naming a FIFO',
    argv: ['gateway-node', 'list'],
    env: { ...CONNECTION, ZENOVA_CA_FILE: fifo },
    message: /^zenova: ZENOVA_CA_FILE \S+named\.fifo \(from the environment\) is not a regular file \(it is a FIFO, a named pipe\); expected a PEM certificate$/m,
  },
  {
    what: 'gateway-node create --ca-file /dev/zero',
    argv: ['gateway-node', 'create', '--name', 'edge-1', '--address', 'edge-1.example.test', '--ca-file', '/dev/zero'],
    env: CONNECTION,
    message: /^zenova: --ca-file \/dev\/zero is not a regular file \(it is a character device\); expected a PEM certificate$/m,
  },
  {
    what: 'gateway-node create --ca-file naming a FIFO',
    argv: ['gateway-node', 'create', '--name', 'edge-1', '--address', 'edge-1.example.test', '--ca-file', 'named.fifo'],
    env: CONNECTION,
    message: /^zenova: --ca-file named\.fifo is not a regular file \(it is a FIFO, a named pipe\); expected a PEM certificate$/m,
  },
  {
    what: '--env-file /dev/zero',
    argv: ['gateway-node', 'list', '--env-file', '/dev/zero'],
    env: {},
    message: /^zenova: --env-file \/dev\/zero is not a regular file \(it is a character device\); is it really an env file\?$/m,
  },
  {
    what: '--env-file naming a FIFO',
    argv: ['gateway-node', 'list', '--env-file', 'named.fifo'],
    env: {},
    message: /^zenova: --env-file \S+named\.fifo is not a regular file \(it is a FIFO, a named pipe\); is it really an env file\?$/m,
  },
];

t.test('a device or a FIFO named as a CA file or an env file is refused before it is read: exit 2, naming the option and the path', async (t) => {
  const results = await Promise.all(CASES.map(async (c) => ({ c, result: await zenovaWithin(t, c.argv, c.env) })));
  for (const { c, result } of results) {
    t.equal(result.code, 2, `${c.what}: exit 2\n${result.output}`);
    t.match(result.output, c.message, `${c.what}: the message`);
    t.match(result.output, /Run "zenova gateway-node (list|create) --help" for usage\./, `${c.what}: the help pointer`);
  }
});

t.test('a regular CA file and env file are still read as before', async (t) => {
  const envFile = join(work, 'ok.env');
  writeFileSync(envFile, 'ZENOVA_CONTROL_PLANE_URL=http://127.0.0.1:1\nZENOVA_ADMIN_TOKEN=test-admin-token-0123456789abcdef\nZENOVA_CA_FILE=not-a-cert.pem\n');
  writeFileSync(join(work, 'not-a-cert.pem'), 'hello\n');
  const result = await zenovaWithin(t, ['gateway-node', 'list', '--env-file', envFile], {});
  t.equal(result.code, 2);
  t.match(result.output, /^zenova: ZENOVA_CA_FILE \S+not-a-cert\.pem \(from env file \S+ok\.env\) is not a PEM certificate$/m, 'both files were read: the CA file\'s content is what is refused');
});

t.test('install node --package naming a FIFO is refused as NODE-PKG-UNREADABLE at once, not waited on for a writer', async (t) => {
  // Were the open to wait for a writer, this one (opened once the deadline passed) lets it go on and end.
  t.teardown(() => {
    try {
      closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {
      // No reader waiting (ENXIO): nothing to release.
    }
  });
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), DEADLINE_MS);
  });
  const verdict = await Promise.race([verifyPackage(fifo, releaseKeys().publicKeyPem), late]);
  clearTimeout(timer);
  t.not(verdict, 'late', 'answered before the deadline');
  t.match(verdict, { ok: false, code: 'NODE-PKG-UNREADABLE', cause: /^--package \S+named\.fifo is not a regular file \(it is a FIFO, a named pipe\)$/ });
  t.match(await verifyPackage('/dev/zero', releaseKeys().publicKeyPem), { ok: false, code: 'NODE-PKG-UNREADABLE', cause: '--package /dev/zero is not a regular file (it is a device)' });
});
