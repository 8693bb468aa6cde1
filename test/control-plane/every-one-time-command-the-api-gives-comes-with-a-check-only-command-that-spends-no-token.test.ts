/**
 * Seed 004 §9.4 step 1: the operator pre-checks the host with `--check-only` before running the
 * command that spends the token. Typed by hand, that pre-check lacks the flags the control plane
 * adds (`--ca-file` for a private CA: NODE-CP-TLS; `--install-dir`: the default dir checked instead),
 * so every answer that carries a one-time command (create, and each reissue) also carries
 * `checkCommand`: the same installer run with the same settings, `--check-only`, and no token.
 */
import t from 'tap';
import type { Test } from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { createTestCa } from '../fixtures/tls.js';
import { bearer, createNode, issue, migratedPool, nodesApp } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { app } = await nodesApp(t, db.url);
const ca = await createTestCa();

interface Issued { kind: string; command: string; checkCommand?: string; token: string }

/** The check command carries no token in any form, and nothing is piped into it. */
function spendsNoToken(t: Test, issued: Issued): void {
  const check = issued.checkCommand ?? '';
  t.notOk(check.includes(issued.token), `${issued.kind}: the token is not in the check command`);
  t.notMatch(check, /--token/, `${issued.kind}: no --token or --token-file`);
  t.notMatch(check, /\|/, `${issued.kind}: nothing piped in`);
  t.match(check, /^sudo \.\/zenova install node /, `${issued.kind}: the same installer, run the same way`);
  t.match(check, / --check-only$/, `${issued.kind}: a check-only run`);
}

t.test('a node with a private CA and an install dir: every check command has --ca-file and --install-dir', async (t) => {
  const { node, install } = await createNode(app, { controlPlaneUrl: 'https://cp.example.com:7443', caPem: ca.certPem, installDir: '/data/zenova-node' });
  const created = install as Issued;
  t.equal(created.checkCommand,
    'sudo ./zenova install node --package zenova-node.zpkg --control-plane https://cp.example.com:7443 '
    + '--ca-file zenova-control-plane-ca.pem --install-dir /data/zenova-node --check-only', 'create');
  spendsNoToken(t, created);

  const reissued = (await issue(app, node.name, 'install')).json<Issued>();
  t.equal(reissued.checkCommand, created.checkCommand, 'a reissued install command has the same check');
  spendsNoToken(t, reissued);

  const reenroll = (await issue(app, node.name, 'reenroll')).json<Issued>();
  t.equal(reenroll.checkCommand,
    'sudo ./zenova install node --package zenova-node.zpkg --reenroll --control-plane https://cp.example.com:7443 '
    + '--ca-file zenova-control-plane-ca.pem --install-dir /data/zenova-node --check-only',
    're-enroll: the installer\'s re-enroll dry run (--reenroll --check-only)');
  spendsNoToken(t, reenroll);

  const upgrade = (await issue(app, node.name, 'upgrade')).json<Issued>();
  t.equal(upgrade.checkCommand,
    'sudo ./zenova install node --package zenova-node.zpkg --control-plane https://cp.example.com:7443 '
    + '--ca-file zenova-control-plane-ca.pem --upgrade --check-only',
    'upgrade: the upgrade dry run, without --install-dir (the installer refuses it with --upgrade)');
  spendsNoToken(t, upgrade);
});

t.test('a node with neither: the plain check of the seed, the default dir', async (t) => {
  const { node, install } = await createNode(app, { controlPlaneUrl: 'https://cp.example.com' });
  const created = install as Issued;
  t.equal(created.checkCommand, 'sudo ./zenova install node --package zenova-node.zpkg --control-plane https://cp.example.com --check-only');
  spendsNoToken(t, created);
  const reenroll = (await issue(app, node.name, 'reenroll')).json<Issued>();
  t.equal(reenroll.checkCommand, 'sudo ./zenova install node --package zenova-node.zpkg --reenroll --control-plane https://cp.example.com --check-only');
});

t.test('a private CA alone, or an install dir alone, adds just its flag; a value a shell reads is quoted as in the command', async (t) => {
  const withCa = (await createNode(app, { controlPlaneUrl: 'https://cp.example.com', caPem: ca.certPem })).install as Issued;
  t.equal(withCa.checkCommand, 'sudo ./zenova install node --package zenova-node.zpkg --control-plane https://cp.example.com --ca-file zenova-control-plane-ca.pem --check-only');
  const withDir = (await createNode(app, { controlPlaneUrl: 'https://[::1]:8443', installDir: '/srv/zenova_node-1.2' })).install as Issued;
  t.equal(withDir.checkCommand, "sudo ./zenova install node --package zenova-node.zpkg --control-plane 'https://[::1]:8443' --install-dir /srv/zenova_node-1.2 --check-only");
  t.match(withDir.command, / --control-plane 'https:\/\/\[::1\]:8443' /, 'quoted as the install command quotes it');
});

t.test('after a network edit, a reissued command and its check both carry the new values', async (t) => {
  const { node } = await createNode(app, { controlPlaneUrl: 'https://cp.example.com' });
  const edited = await app.inject({
    method: 'PATCH', url: `/api/v1/nodes/${node.name}/network`, headers: bearer,
    payload: { controlPlaneUrl: 'https://cp2.example.com', caPem: ca.certPem },
  });
  t.equal(edited.statusCode, 200, 'the network edit is taken');
  const reissued = (await issue(app, node.name, 'install')).json<Issued>();
  t.match(reissued.command, / --control-plane https:\/\/cp2\.example\.com --token-file - --ca-file zenova-control-plane-ca\.pem$/);
  t.equal(reissued.checkCommand, 'sudo ./zenova install node --package zenova-node.zpkg --control-plane https://cp2.example.com --ca-file zenova-control-plane-ca.pem --check-only');
});
