/**
 * The `checkCommand` the control plane gives beside each one-time command (seed 004 §9.4 step 1),
 * pasted into a real shell as the operator pastes it, reaches the installer's own `zenova install
 * node` as a check-only run with the same settings as the command that spends the token: the same
 * mode (a re-enroll or upgrade dry run), control-plane URL, CA file and install dir. It reads no
 * token (nothing on its standard input is touched) and writes nothing. Run on a fake host whose
 * package is missing, so neither run gets past the checks.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { runInstall } from '../../installer/src/commands/install.js';
import type { ControlPlaneProbe } from '../../installer/src/install/control-plane-probe.js';
import { testDatabase } from '../fixtures/postgres.js';
import { createTestCa } from '../fixtures/tls.js';
import { createNode, issue, migratedPool, nodesApp } from '../control-plane/nodes-harness.js';
import { captureCli, healthyControlPlane, hostEnv, listTree } from './fake-host.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { app } = await nodesApp(t, db.url);
const ca = await createTestCa();

const scratch = mkdtempSync(join(tmpdir(), 'zn-check-cmd-'));
t.teardown(() => rmSync(scratch, { recursive: true, force: true }));

function script(path: string, body: string): void {
  writeFileSync(path, `#!/bin/sh\n${body}`);
  chmodSync(path, 0o755);
}

// Stand-ins: `sudo` runs its arguments; `./zenova` records its arguments (one a line) and its standard input.
const bin = join(scratch, 'bin');
mkdirSync(bin);
script(join(bin, 'sudo'), 'exec "$@"\n');
/** The dir the operator runs the commands in: the installer and the CA file the commands name (no package: the checks block). */
const workDir = join(scratch, 'work');
mkdirSync(workDir);
script(join(workDir, 'zenova'), 'for a in "$@"; do printf \'%s\\n\' "$a"; done > "$ZN_CMD_LOG/argv"\nif [ -t 0 ]; then : > "$ZN_CMD_LOG/stdin"; else cat > "$ZN_CMD_LOG/stdin"; fi\n');
writeFileSync(join(workDir, 'zenova-control-plane-ca.pem'), ca.certPem);

/** The arguments and standard input a real shell hands `./zenova` for the pasted line. */
function pasted(command: string): { argv: string[]; stdin: string } {
  const log = mkdtempSync(join(scratch, 'log-'));
  const run = spawnSync('sh', [], { cwd: workDir, input: `${command}\n`, encoding: 'utf8', env: { ...process.env, PATH: `${bin}:${process.env.PATH ?? '/usr/bin:/bin'}`, ZN_CMD_LOG: log } });
  if (run.status !== 0) throw new Error(`sh failed: ${run.stderr}`);
  const argv = readFileSync(join(log, 'argv'), 'utf8').split('\n').slice(0, -1);
  const stdin = readFileSync(join(log, 'stdin'), 'utf8');
  rmSync(log, { recursive: true, force: true });
  return { argv, stdin };
}

interface Observed {
  code: number;
  header: string;
  installDir: string | undefined;
  caFile: string | undefined;
  probes: Array<{ url: string; caFile: string | undefined }>;
  stdinRead: boolean;
  written: boolean;
}

/** Runs the installer's `zenova install node` with `argv` (after `zenova`) on a fresh fake host; `stdin` as its standard input. */
async function installer(argv: string[], stdin: string): Promise<Observed> {
  if (argv[0] !== 'install') throw new Error(`not an install run: ${argv.join(' ')}`);
  const root = mkdtempSync(join(scratch, 'host-'));
  const probes: Observed['probes'] = [];
  const healthy = healthyControlPlane();
  const probeControlPlane: ControlPlaneProbe = async (url, caPem, caFile) => {
    probes.push({ url, caFile: caFile?.path });
    return healthy(url, caPem, caFile);
  };
  let stdinRead = false;
  const cli = captureCli(workDir);
  const input = {
    async *[Symbol.asyncIterator]() {
      stdinRead = true;
      yield stdin;
    },
  };
  const host = hostEnv(root, { probeControlPlane });
  const before = listTree(root);
  const code = await runInstall(argv.slice(1), { ...cli.ctx, stdin: input }, host);
  const after = listTree(root);
  const out = cli.out();
  return {
    code,
    header: /^(.*): checking this host/.exec(out)?.[1] ?? out,
    installDir: /^ {2}\S+ install dir (\S+)$/m.exec(out)?.[1] ?? /^ {2}✓ install dir (\S+)$/m.exec(out)?.[1],
    caFile: /^ {2}\S+ CA file (\S+)$/m.exec(out)?.[1],
    probes,
    stdinRead,
    written: JSON.stringify(before) !== JSON.stringify(after),
  };
}

interface Issued { kind: 'install' | 'reenroll' | 'upgrade'; command: string; checkCommand?: string; token: string }

const HEADERS: Record<Issued['kind'], [check: string, run: string]> = {
  install: ['zenova install node --check-only', 'zenova install node'],
  reenroll: ['zenova install node --check-only --reenroll', 'zenova install node --reenroll'],
  upgrade: ['zenova install node --check-only --upgrade', 'zenova install node --upgrade'],
};

async function checksAsTheCommand(t: Test, issued: Issued, expected: { url: string; caFile: boolean; installDir: string }): Promise<void> {
  t.type(issued.checkCommand, 'string', `${issued.kind}: the answer carries a check command`);
  const check = pasted(issued.checkCommand ?? 'false');
  const spend = pasted(issued.command);
  t.equal(spend.stdin, `${issued.token}\n`, `${issued.kind}: the command that spends the token pipes it in`);
  t.notOk(check.argv.some((arg) => arg.includes(issued.token)), `${issued.kind}: no argument of the check carries the token`);
  t.equal(check.stdin, '', `${issued.kind}: nothing is piped into the check`);

  const checked = await installer(check.argv, issued.token);
  const run = await installer(spend.argv, spend.stdin);
  t.equal(checked.header, HEADERS[issued.kind][0], `${issued.kind}: the installer takes the check as a check-only run of that mode`);
  t.equal(run.header, HEADERS[issued.kind][1], `${issued.kind}: and the command as the run itself`);
  t.equal(checked.code, 1, `${issued.kind}: the check ran the checks (exit 1 on the missing package), not a usage error (exit 2)`);
  t.notOk(checked.stdinRead, `${issued.kind}: the check reads no token from its standard input`);
  t.ok(run.stdinRead, `${issued.kind}: the command reads its token`);
  t.notOk(checked.written, `${issued.kind}: the check wrote nothing`);
  const caPath = expected.caFile ? join(workDir, 'zenova-control-plane-ca.pem') : undefined;
  t.same(checked.probes, [{ url: expected.url, caFile: caPath }], `${issued.kind}: the check reaches the control plane at the command's URL with the command's CA file`);
  t.same(checked.probes, run.probes, `${issued.kind}: as the command does`);
  t.equal(checked.caFile, caPath, `${issued.kind}: the CA file checked is the command's`);
  t.equal(checked.installDir, expected.installDir, `${issued.kind}: the dir checked is the one the command installs in`);
  t.equal(checked.installDir, run.installDir, `${issued.kind}: the same dir as the command's run`);
}

t.test('a node with a private CA and an install dir: each check is the run of its command with --check-only', async (t) => {
  const url = 'https://cp.example.test:9443';
  const { node, install } = await createNode(app, { controlPlaneUrl: url, caPem: ca.certPem, installDir: '/data/zenova-node' });
  await checksAsTheCommand(t, install as Issued, { url, caFile: true, installDir: '/data/zenova-node' });
  const reenroll = (await issue(app, node.name, 'reenroll')).json<Issued>();
  await checksAsTheCommand(t, reenroll, { url, caFile: true, installDir: '/data/zenova-node' });
  const upgrade = (await issue(app, node.name, 'upgrade')).json<Issued>();
  await checksAsTheCommand(t, upgrade, { url, caFile: true, installDir: '/opt/zenova-node' });
});

t.test('a node with neither: the check runs on the default dir against the system trust store, as its command', async (t) => {
  const url = 'https://[::1]:8443';
  const { node, install } = await createNode(app, { controlPlaneUrl: url });
  await checksAsTheCommand(t, install as Issued, { url, caFile: false, installDir: '/opt/zenova-node' });
  const reissued = (await issue(app, node.name, 'install')).json<Issued>();
  await checksAsTheCommand(t, reissued, { url, caFile: false, installDir: '/opt/zenova-node' });
});
