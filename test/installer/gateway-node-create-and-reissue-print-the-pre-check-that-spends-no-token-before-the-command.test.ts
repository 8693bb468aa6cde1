// `zenova gateway-node create` and `install-command` / `reenroll-command` / `upgrade-command`, against a
// real control-plane process and PostgreSQL: each prints the API's check command (seed 004 §9.4 step
// 1: the same installer run with --check-only, no token) before the command that spends the token,
// with the command's --ca-file and --install-dir; --json passes it on in the API's answer.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { createTestCa } from '../fixtures/tls.js';
import { ADMIN_TOKEN, printedCommand, startControlPlane, tempDir, zenova } from './gateway-node-harness.js';

const CALLBACK = 'https://cp.zenova.test:7400';
const TOKEN = /zn_it_[A-Za-z0-9_-]{43}/g;

const cp = await startControlPlane(t);
const cwd = tempDir(t); // no .zenova/dev.env here, so only the env given below counts
const env = { ZENOVA_CONTROL_PLANE_URL: cp.url, ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN };
const run = (...argv: string[]): ReturnType<typeof zenova> => zenova(argv, { env, cwd });

/** The indented pre-check line: `sudo ./zenova install node … --check-only`. */
const printedCheck = (stdout: string): string | undefined => /^ {2}(sudo \.\/zenova install node .* --check-only)$/m.exec(stdout)?.[1];

/** The pre-check is printed, labelled as spending no token, and before the command that spends it. */
function checkBeforeCommand(t: Test, stdout: string, expected: string, what: string): void {
  t.equal(printedCheck(stdout), expected, `${what}: the pre-check is printed`);
  const command = printedCommand(stdout);
  t.ok(command, `${what}: the command is printed`);
  t.ok(stdout.indexOf(expected) < stdout.indexOf(command ?? '\0'), `${what}: the pre-check comes first`);
  t.match(stdout, /^Pre-check for node \S+ \(spends no token, writes nothing; run it as often as you like\):$/m, `${what}: labelled as spending no token`);
  t.match(stdout.slice(0, stdout.indexOf(expected)), /do not run the .* command until it passes/, `${what}: says to run the command only once it passes`);
  const tokens = stdout.match(TOKEN) ?? [];
  t.equal(tokens.length, 1, `${what}: the token appears once, in the command`);
  t.notOk(expected.includes(tokens[0] ?? '\0'), `${what}: not in the pre-check`);
}

t.test('create with a private CA and an install dir prints the pre-check with --ca-file and --install-dir first', async (t) => {
  const ca = await createTestCa();
  const caFile = path.join(cwd, 'internal-ca.pem');
  writeFileSync(caFile, ca.certPem);
  const created = await run('gateway-node', 'create', '--name', 'edge-check', '--address', 'edge-check.example.com', '--control-plane-url', CALLBACK,
    '--ca-file', caFile, '--install-dir', '/srv/zenova-node');
  t.equal(created.code, 0, 'exits 0', { stderr: created.stderr });
  checkBeforeCommand(t, created.stdout,
    `sudo ./zenova install node --package zenova-node.zpkg --control-plane ${CALLBACK} --ca-file zenova-control-plane-ca.pem --install-dir /srv/zenova-node --check-only`,
    'create');
  t.match(created.stdout, /in the directory that holds zenova-node\.zpkg and the CA file named below\./, 'says the pre-check needs the CA file too');

  const reissued = await run('gateway-node', 'install-command', 'edge-check');
  t.equal(reissued.code, 0, 'exits 0', { stderr: reissued.stderr });
  checkBeforeCommand(t, reissued.stdout,
    `sudo ./zenova install node --package zenova-node.zpkg --control-plane ${CALLBACK} --ca-file zenova-control-plane-ca.pem --install-dir /srv/zenova-node --check-only`,
    'install-command');

  const reenroll = await run('gateway-node', 'reenroll-command', 'edge-check');
  t.equal(reenroll.code, 0, 'exits 0', { stderr: reenroll.stderr });
  checkBeforeCommand(t, reenroll.stdout,
    `sudo ./zenova install node --package zenova-node.zpkg --reenroll --control-plane ${CALLBACK} --ca-file zenova-control-plane-ca.pem --install-dir /srv/zenova-node --check-only`,
    'reenroll-command');

  const upgrade = await run('gateway-node', 'upgrade-command', 'edge-check');
  t.equal(upgrade.code, 0, 'exits 0', { stderr: upgrade.stderr });
  checkBeforeCommand(t, upgrade.stdout,
    `sudo ./zenova install node --package zenova-node.zpkg --control-plane ${CALLBACK} --ca-file zenova-control-plane-ca.pem --upgrade --check-only`,
    'upgrade-command');
});

t.test('create with neither prints the plain pre-check; --json carries it in the answer', async (t) => {
  const created = await run('gateway-node', 'create', '--name', 'edge-check-plain', '--address', 'edge-check-plain.example.com', '--control-plane-url', CALLBACK);
  t.equal(created.code, 0, 'exits 0', { stderr: created.stderr });
  checkBeforeCommand(t, created.stdout, `sudo ./zenova install node --package zenova-node.zpkg --control-plane ${CALLBACK} --check-only`, 'create');
  t.match(created.stdout, /in the directory that holds zenova-node\.zpkg\.$/m, 'no CA file to mention');

  const json = await run('gateway-node', 'reenroll-command', 'edge-check-plain', '--json');
  t.equal(json.code, 0, 'exits 0', { stderr: json.stderr });
  t.equal(JSON.parse(json.stdout).checkCommand, `sudo ./zenova install node --package zenova-node.zpkg --reenroll --control-plane ${CALLBACK} --check-only`);
});
