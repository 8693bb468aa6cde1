/**
 * The install dir the control plane stores for a node follows the installer, against a real control
 * plane and real PostgreSQL (the installer with a fake host and service manager, its enrollment the
 * real one): a node created with `--install-dir /srv/qa/zenova-node` and installed without
 * `--install-dir` (so into /opt/zenova-node) shows /opt/zenova-node, and its reenroll command carries
 * that dir and runs as printed (no NODE-DIR-MISMATCH). `zenova-node enroll` by hand names no dir and
 * the stored one is kept; a dir the create field's rules refuse is refused with
 * ZN_ERR_CP_INVALID_REQUEST, nothing stored and the token not used.
 */
import t from 'tap';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { PROTOCOL_VERSION } from '../../proto/src/index.js';
import { testDatabase } from '../fixtures/postgres.js';
import { createNode, httpsMaterial, runEnroll, startControlPlane, tempDir, tokenOf } from './stack.js';
import type { ControlPlane } from './stack.js';
import { runInstall } from '../../installer/src/commands/install.js';
import { captureCli, hostEnv } from '../installer/fake-host.js';
import { buildNodePackage, releaseKeys } from '../installer/package-builder.js';

interface Issued { command: string; checkCommand: string }
interface ErrorBody { error: { code: string; message: string } }

const FACTS = { hostname: 'qa-host', arch: 'x64', version: '0.1.0', protocolVersion: PROTOCOL_VERSION };

async function installDirOf(cp: ControlPlane, name: string): Promise<string | null> {
  const res = await cp.api<{ installDir: string | null }>('GET', `/api/v1/nodes/${name}`);
  if (res.status !== 200) throw new Error(`GET node ${name}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.installDir;
}

async function reenrollCommand(cp: ControlPlane, name: string): Promise<Issued> {
  const res = await cp.api<Issued>('POST', `/api/v1/nodes/${name}/reenroll-command`, {});
  if (res.status !== 200 && res.status !== 201) throw new Error(`reenroll-command ${name}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** The installer's options in an issued command, after the package and control-plane URL the test gives itself. */
function commandOptions(command: string): string[] {
  const words = command.replace(/^printf .*? \| sudo \.\/zenova install node /, '').split(' ');
  const out: string[] = [];
  for (let i = 0; i < words.length; i++) {
    const w = words[i]!;
    if (w === '--package' || w === '--control-plane' || w === '--token-file' || w === '--ca-file') i++;
    else out.push(w);
  }
  return out;
}

t.test('the installer\'s enrollment records its install dir; a hand enrollment keeps it; a bad dir is refused', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-install-dir-');
  const https = await httpsMaterial(join(work, 'https'));
  // Every refused body counts as an enrollment attempt: a budget for all of them.
  const cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw'), env: { ZENOVA_ENROLL_ATTEMPTS_PER_MINUTE: '1000' } });
  const keys = releaseKeys();
  const pkg = await buildNodePackage(work, keys);
  const root = join(work, 'host');
  mkdirSync(root);
  // The real enrollment (no `enroll` stand-in), a fake host, service manager and readiness.
  const host = hostEnv(root, { keyPem: keys.publicKeyPem });
  const install = async (args: string[]): Promise<{ exit: number; out: string }> => {
    const cli = captureCli(work);
    const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', cp.url, '--ca-file', https.caFile, ...args], cli.ctx, host);
    return { exit, out: cli.out() + cli.err() };
  };

  const preflight = await cp.api<{ installDirs?: boolean }>('GET', '/api/enroll/preflight');
  t.equal(preflight.body.installDirs, true, 'the preflight says the control plane takes installDir');

  const created = await createNode(cp, 'qa-inst2', { installDir: '/srv/qa/zenova-node' });
  t.equal(await installDirOf(cp, 'qa-inst2'), '/srv/qa/zenova-node', 'created with its dir');

  await t.test('installed without --install-dir: the node shows /opt/zenova-node and its reenroll command carries it', async (t) => {
    const r = await install(['--token', tokenOf(created.install.command)]);
    if (!t.equal(r.exit, 0, 'installed')) t.comment(r.out);
    t.equal(await installDirOf(cp, 'qa-inst2'), '/opt/zenova-node', 'the dir the installer installed into');
    const issued = await reenrollCommand(cp, 'qa-inst2');
    t.match(issued.command, / --reenroll .* --install-dir \/opt\/zenova-node$/, 'the reenroll command carries it');
    t.match(issued.checkCommand, ' --install-dir /opt/zenova-node ', 'and its check command');
    t.notMatch(issued.command, '/srv/qa', 'not the dir given at create');
    // Run as printed: the installer takes it (QA's NODE-DIR-MISMATCH before).
    const again = await install([...commandOptions(issued.command), '--token', tokenOf(issued.command)]);
    if (!t.equal(again.exit, 0, 'the printed reenroll command re-enrolls')) t.comment(again.out);
    t.notMatch(again.out, 'NODE-DIR-MISMATCH');
    t.equal(await installDirOf(cp, 'qa-inst2'), '/opt/zenova-node');
  });

  await t.test('installed with --install-dir: that dir is recorded', async (t) => {
    const other = await createNode(cp, 'qa-inst3');
    t.equal(await installDirOf(cp, 'qa-inst3'), null, 'created with none');
    const otherRoot = join(work, 'host3');
    mkdirSync(otherRoot);
    const cli = captureCli(work);
    const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', cp.url, '--ca-file', https.caFile, '--install-dir', '/srv/qa3/zenova-node/', '--token', tokenOf(other.install.command)], cli.ctx, hostEnv(otherRoot, { keyPem: keys.publicKeyPem }));
    if (!t.equal(exit, 0, 'installed')) t.comment(cli.out() + cli.err());
    t.equal(await installDirOf(cp, 'qa-inst3'), '/srv/qa3/zenova-node', 'the dir, without its trailing slash');
  });

  await t.test('`zenova-node enroll` by hand names no dir: the stored one is kept', async (t) => {
    const issued = await reenrollCommand(cp, 'qa-inst2');
    const r = await runEnroll(t, { url: cp.url, token: tokenOf(issued.command), stateDir: join(work, 'by-hand'), caFile: https.caFile });
    if (!t.equal(r.code, 0, 'enrolled by hand')) t.comment(r.output);
    t.equal(await installDirOf(cp, 'qa-inst2'), '/opt/zenova-node', 'still the installer\'s dir');
  });

  await t.test('a dir the create field refuses is refused with the enrollment\'s invalid-request error; nothing stored, the token not used', async (t) => {
    const token = tokenOf((await reenrollCommand(cp, 'qa-inst2')).command);
    const cases: Array<[unknown, RegExp]> = [
      ['/tmp/zenova-node', /^body field 'installDir': must not be under \/tmp/],
      ['srv/zenova-node', /^body field 'installDir': must be an absolute path/],
      ['/srv//zenova-node', /^body field 'installDir': must not contain empty path segments/],
      ['/opt/zenova/node', /^body field 'installDir': must not be inside or overlap the central install/],
      ['/zenova-node', /^body field 'installDir': must be at least two levels deep/],
      [42, /^body field 'installDir': must be a string/],
    ];
    for (const [installDir, message] of cases) {
      const res = await cp.api<ErrorBody>('POST', '/api/enroll', { token, mode: 'install', facts: FACTS, installDir });
      t.equal(res.status, 400, JSON.stringify(installDir));
      t.equal(res.body.error.code, 'ZN_ERR_CP_INVALID_REQUEST', JSON.stringify(installDir));
      t.match(res.body.error.message, message, JSON.stringify(installDir));
    }
    t.equal(await installDirOf(cp, 'qa-inst2'), '/opt/zenova-node', 'nothing stored');
    const res = await cp.api<{ nodeName: string }>('POST', '/api/enroll', { token, mode: 'install', facts: FACTS, installDir: '/data/qa/zenova-node' });
    t.equal(res.status, 200, 'the token still enrolls');
    t.equal(await installDirOf(cp, 'qa-inst2'), '/data/qa/zenova-node', 'with its dir recorded');
  });
});
