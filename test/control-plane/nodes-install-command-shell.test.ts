/**
 * The install command is pasted into a shell as it is: a real shell must hand the installer each
 * value as one argument, exactly as stored, whatever its glob options (bash's failglob, which zsh's
 * default nomatch matches) or the files in the directory the operator runs it in.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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

const PREFIX = 'sudo ./zenova install node ';
const IPV6_URL = 'https://[::1]:8443';

/** An empty dir, and one holding `https:/1:8443`, which the unquoted glob `https://[::1]:8443` matches. */
const emptyDir = mkdtempSync(join(tmpdir(), 'zn-cmd-empty-'));
const decoyDir = mkdtempSync(join(tmpdir(), 'zn-cmd-decoy-'));
mkdirSync(join(decoyDir, 'https:'));
writeFileSync(join(decoyDir, 'https:', '1:8443'), '');
t.teardown(() => {
  rmSync(emptyDir, { recursive: true, force: true });
  rmSync(decoyDir, { recursive: true, force: true });
});

const SHELLS: Array<[name: string, argv: string[]]> = [
  ['bash -O failglob', ['bash', '-O', 'failglob', '-c']],
  ['bash', ['bash', '-c']],
  ['sh', ['sh', '-c']],
];

/** Runs the command's arguments through each shell in each dir and checks they arrive as `expected`. */
function arrivesIntact(t: Test, command: string, expected: string[], what: string): void {
  t.ok(command.startsWith(PREFIX), `${what}: starts with ${PREFIX}`);
  const script = `printf '%s\\n' ${command.slice(PREFIX.length)}`;
  for (const [shell, [program = 'bash', ...args]] of SHELLS) {
    for (const [dirName, cwd] of [['an empty dir', emptyDir], ['a dir with a file the glob matches', decoyDir]] as const) {
      const run = spawnSync(program, [...args, script], { cwd, encoding: 'utf8' });
      t.same({ status: run.status, stderr: run.stderr, args: run.stdout.split('\n').slice(0, -1) }, { status: 0, stderr: '', args: expected },
        `${what}: ${shell} in ${dirName} gets every argument as stored`);
    }
  }
}

t.test('an IPv6 control-plane URL is quoted in every command, so no shell globs it', async (t) => {
  const { node, install } = await createNode(app, { controlPlaneUrl: IPV6_URL, caPem: ca.certPem, installDir: '/data/zenova-node' });
  t.equal(node.controlPlaneUrl, IPV6_URL);
  t.equal(install.command,
    `sudo ./zenova install node --package zenova-node.zpkg --control-plane '${IPV6_URL}' --token ${install.token} ` +
    '--ca-file zenova-control-plane-ca.pem --install-dir /data/zenova-node', 'only the value that needs it is quoted');
  const tail = ['--ca-file', 'zenova-control-plane-ca.pem'];
  arrivesIntact(t, install.command,
    ['--package', 'zenova-node.zpkg', '--control-plane', IPV6_URL, '--token', install.token, ...tail, '--install-dir', '/data/zenova-node'], 'install');
  const reenroll = (await issue(app, node.name, 'reenroll')).json<{ command: string; token: string }>();
  arrivesIntact(t, reenroll.command,
    ['--package', 'zenova-node.zpkg', '--reenroll', '--control-plane', IPV6_URL, '--token', reenroll.token, ...tail, '--install-dir', '/data/zenova-node'],
    'reenroll');
  const upgrade = (await issue(app, node.name, 'upgrade')).json<{ command: string; token: string }>();
  arrivesIntact(t, upgrade.command,
    ['--package', 'zenova-node.zpkg', '--control-plane', IPV6_URL, '--token', upgrade.token, ...tail, '--upgrade'], 'upgrade');
});

t.test('an ordinary URL and install dir stay unquoted and arrive intact', async (t) => {
  const { install } = await createNode(app, { controlPlaneUrl: 'https://cp.example.com:7443/zenova', installDir: '/srv/zenova_node-1.2' });
  t.equal(install.command,
    `sudo ./zenova install node --package zenova-node.zpkg --control-plane https://cp.example.com:7443/zenova --token ${install.token} ` +
    '--install-dir /srv/zenova_node-1.2');
  arrivesIntact(t, install.command, ['--package', 'zenova-node.zpkg', '--control-plane', 'https://cp.example.com:7443/zenova',
    '--token', install.token, '--install-dir', '/srv/zenova_node-1.2'], 'ordinary');
});

t.test('any value a shell would read is quoted whole, a single quote in it included', (t) => {
  // Not values validation lets through: the quoting alone must keep them one literal argument.
  const url = "https://cp.example.com/~ops/it's $(id) `id` *";
  const installDir = '/data/zenova node;rm -rf x';
  const command = installCommand({ kind: 'install', controlPlaneUrl: url, token: 'zn_it_abc-_1', hasCa: false, installDir });
  arrivesIntact(t, command, ['--package', 'zenova-node.zpkg', '--control-plane', url, '--token', 'zn_it_abc-_1', '--install-dir', installDir], 'odd values');
  t.end();
});
