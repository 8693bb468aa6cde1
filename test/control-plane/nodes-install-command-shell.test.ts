/**
 * The install command is pasted into a shell as it is: a real shell must hand the installer each
 * value as one argument, exactly as stored, whatever its glob options (bash's failglob, which zsh's
 * default nomatch matches) or the files in the directory the operator runs it in; and the one-time
 * token must reach the installer on its standard input (`--token-file -`), from the shell's own
 * printf, so it is in no process's arguments (`ps`, /proc/PID/cmdline: readable by every local user).
 * Run here with stand-ins for `sudo` and `./zenova` that record their arguments and standard input,
 * and an external `printf` ahead on PATH that records being run.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { installCommand } from '../../control-plane/src/nodes/install-command.js';
import { createTestCa } from '../fixtures/tls.js';
import { testDatabase } from '../fixtures/postgres.js';
import { createNode, issue, migratedPool, nodesApp } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { app } = await nodesApp(t, db.url);
const ca = await createTestCa();

const IPV6_URL = 'https://[::1]:8443';

const scratch = mkdtempSync(join(tmpdir(), 'zn-cmd-'));
t.teardown(() => rmSync(scratch, { recursive: true, force: true }));

function script(path: string, body: string): void {
  writeFileSync(path, `#!/bin/sh\n${body}`);
  chmodSync(path, 0o755);
}

/**
 * Stand-ins, each writing to $ZN_CMD_LOG: `sudo` (its arguments, then runs them), an external
 * `printf` (that it ran at all: the shell's builtin must be the one used), and `./zenova` in each
 * dir (its arguments, and its standard input as the installer's `--token-file -` reads it).
 */
const bin = join(scratch, 'bin');
mkdirSync(bin);
script(join(bin, 'sudo'), 'for a in "$@"; do printf \'%s\\n\' "$a"; done > "$ZN_CMD_LOG/sudo.argv"\nexec "$@"\n');
script(join(bin, 'printf'), 'echo "external printf run: $*" >> "$ZN_CMD_LOG/external-printf"\n');
const ZENOVA_STUB = 'for a in "$@"; do printf \'%s\\n\' "$a"; done > "$ZN_CMD_LOG/zenova.argv"\ncat > "$ZN_CMD_LOG/zenova.stdin"\n';

/** A dir with only the installer, and one also holding `https:/1:8443`, which the unquoted glob `https://[::1]:8443` matches. */
const plainDir = join(scratch, 'plain');
const decoyDir = join(scratch, 'decoy');
for (const dir of [plainDir, decoyDir]) {
  mkdirSync(dir);
  script(join(dir, 'zenova'), ZENOVA_STUB);
}
mkdirSync(join(decoyDir, 'https:'));
writeFileSync(join(decoyDir, 'https:', '1:8443'), '');

/** Each reads the pasted line from its standard input, as an interactive shell does: no -c, so the line is in no argv either. */
const SHELLS: Array<[name: string, argv: string[]]> = [
  ['bash -O failglob', ['bash', '-O', 'failglob']],
  ['bash', ['bash']],
  ['sh', ['sh']],
];

const lines = (text: string): string[] => text.split('\n').slice(0, -1);

/**
 * Runs the command in each shell in each dir: the installer gets every argument as `expected` and
 * `--token-file -`, never the token; the token arrives on its standard input; no external printf ran.
 */
function runsAsIssued(t: Test, command: string, token: string, expected: string[], what: string): void {
  t.notOk(command.includes(`--token ${token}`), `${what}: no --token argument`);
  for (const [shell, [program = 'bash', ...args]] of SHELLS) {
    for (const [dirName, cwd] of [['a dir holding the installer', plainDir], ['a dir with a file the glob matches', decoyDir]] as const) {
      const log = mkdtempSync(join(scratch, 'log-'));
      const run = spawnSync(program, args, {
        cwd, input: `${command}\n`, encoding: 'utf8', env: { ...process.env, PATH: `${bin}:${process.env.PATH ?? '/usr/bin:/bin'}`, ZN_CMD_LOG: log },
      });
      const read = (name: string): string | undefined => (existsSync(join(log, name)) ? readFileSync(join(log, name), 'utf8') : undefined);
      const zenovaArgv = lines(read('zenova.argv') ?? '');
      t.same({ status: run.status, stderr: run.stderr, args: zenovaArgv }, { status: 0, stderr: '', args: ['install', 'node', ...expected] },
        `${what}: ${shell} in ${dirName} gives the installer every argument as stored`);
      t.same(lines(read('sudo.argv') ?? ''), ['./zenova', 'install', 'node', ...expected], `${what}: ${shell} in ${dirName}: sudo runs ./zenova with them`);
      t.equal(read('zenova.stdin'), `${token}\n`, `${what}: ${shell} in ${dirName}: the token arrives on the installer's standard input`);
      t.notOk([...zenovaArgv, ...lines(read('sudo.argv') ?? '')].some((arg) => arg.includes(token)), `${what}: ${shell} in ${dirName}: the token is in no argument`);
      t.equal(read('external-printf'), undefined, `${what}: ${shell} in ${dirName}: printf is the shell's own (no process got the token as an argument)`);
      rmSync(log, { recursive: true, force: true });
    }
  }
}

t.test('an IPv6 control-plane URL is quoted in every command, so no shell globs it; the token is piped in', async (t) => {
  const { node, install } = await createNode(app, { controlPlaneUrl: IPV6_URL, caPem: ca.certPem, installDir: '/data/zenova-node' });
  t.equal(node.controlPlaneUrl, IPV6_URL);
  t.equal(install.command,
    `printf '%s\\n' ${install.token} | sudo ./zenova install node --package zenova-node.zpkg --control-plane '${IPV6_URL}' --token-file - ` +
    '--ca-file zenova-control-plane-ca.pem --install-dir /data/zenova-node', 'only the value that needs it is quoted');
  const tail = ['--ca-file', 'zenova-control-plane-ca.pem'];
  runsAsIssued(t, install.command, install.token,
    ['--package', 'zenova-node.zpkg', '--control-plane', IPV6_URL, '--token-file', '-', ...tail, '--install-dir', '/data/zenova-node'], 'install');
  const reenroll = (await issue(app, node.name, 'reenroll')).json<{ command: string; token: string }>();
  runsAsIssued(t, reenroll.command, reenroll.token,
    ['--package', 'zenova-node.zpkg', '--reenroll', '--control-plane', IPV6_URL, '--token-file', '-', ...tail, '--install-dir', '/data/zenova-node'],
    'reenroll');
  const upgrade = (await issue(app, node.name, 'upgrade')).json<{ command: string; token: string }>();
  runsAsIssued(t, upgrade.command, upgrade.token,
    ['--package', 'zenova-node.zpkg', '--control-plane', IPV6_URL, '--token-file', '-', ...tail, '--upgrade'], 'upgrade');
});

t.test('an ordinary URL and install dir stay unquoted and arrive intact', async (t) => {
  const { install } = await createNode(app, { controlPlaneUrl: 'https://cp.example.com:7443/zenova', installDir: '/srv/zenova_node-1.2' });
  t.equal(install.command,
    `printf '%s\\n' ${install.token} | sudo ./zenova install node --package zenova-node.zpkg --control-plane https://cp.example.com:7443/zenova ` +
    '--token-file - --install-dir /srv/zenova_node-1.2');
  runsAsIssued(t, install.command, install.token, ['--package', 'zenova-node.zpkg', '--control-plane', 'https://cp.example.com:7443/zenova',
    '--token-file', '-', '--install-dir', '/srv/zenova_node-1.2'], 'ordinary');
});

t.test('any value a shell would read is quoted whole, a single quote in it included, the token too', (t) => {
  // Not values validation lets through: the quoting alone must keep them one literal argument.
  const url = "https://cp.example.com/~ops/it's $(id) `id` *";
  const installDir = '/data/zenova node;rm -rf x';
  const token = "zn_it_it's $(id) `id` * ; x";
  const command = installCommand({ kind: 'install', controlPlaneUrl: url, token, hasCa: false, installDir });
  runsAsIssued(t, command, token, ['--package', 'zenova-node.zpkg', '--control-plane', url, '--token-file', '-', '--install-dir', installDir], 'odd values');
  t.end();
});
