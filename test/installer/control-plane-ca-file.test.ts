/**
 * The installed CA file (etc/control-plane-ca.pem) follows what the node's identity trusts for the
 * control plane: a --reenroll with --ca-file replaces it, one without removes it (that control
 * plane was verified with this host's system trust store), and only once the token was redeemed.
 * An --upgrade without --ca-file trusts that file only while the identity holds a CA too, and names
 * it as the installed CA file, never as a --ca-file the operator did not pass. The enrollment and
 * the token redemption are stand-ins; the last test runs the real HTTPS probe.
 */
import t from 'tap';
import type { Test } from 'tap';
import { generateKeyPairSync } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { probeControlPlane } from '../../installer/src/install/control-plane-probe.js';
import type { ControlPlaneProbe } from '../../installer/src/install/control-plane-probe.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import type { UpgradeTokenRedeemer } from '../../installer/src/install/upgrade-token.js';
import { EnrollError } from '../../edge-node/src/enroll/enroll-errors.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { PROTOCOL_VERSION } from '../../proto/src/index.js';
import { productVersion } from '../../proto/src/product-version.js';
import { createTestCa } from '../fixtures/tls.js';
import { captureCli, fakePreflightServer, fakeServices, healthyControlPlane, hostEnv } from './fake-host.js';
import type { FakeServices } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-cafile-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const OLD = '0.0.9';
const CA_FILE = 'opt/zenova-node/etc/control-plane-ca.pem';
const IDENTITY = 'opt/zenova-node/data/identity.json';

/** Saves an identity as the real enrollment does: the control plane's CA only when one was given. */
const enrollLikeTheNode = (refuse: { on: boolean } = { on: false }): Enroller => async (opts) => {
  if (refuse.on) throw new EnrollError('ZN_ERR_CP_TOKEN_EXPIRED', 'the token has expired');
  mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
  const signing = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();
  writeFileSync(join(opts.stateDir, 'identity.json'), JSON.stringify({
    nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gateway: { target: 'gw.example.test:8443', serverName: 'gw.example.test' },
    ...(opts.caPem !== undefined ? { controlPlaneCaPem: opts.caPem } : {}),
    configSigningPublicKeyPem: signing, enrolledAt: new Date().toISOString(),
  }));
  return { nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gatewayTarget: 'gw.example.test:8443', stateDir: opts.stateDir, reenrolled: opts.reenroll === true };
};

const redeemOk: UpgradeTokenRedeemer = async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion });

/** A probe answering as a healthy control plane at `version` that records the trust it was asked with. */
function recordingProbe(version: string, seen: Array<{ caPem: string | undefined; caFile: string | undefined }>): ControlPlaneProbe {
  const healthy = healthyControlPlane({ version });
  return async (url, caPem, caFile) => {
    seen.push({ caPem, caFile: caFile?.path });
    return healthy(url, caPem, caFile);
  };
}

interface Host {
  root: string;
  /** The package of the installed release (OLD), for a --reenroll. */
  oldPackage: string;
  services: FakeServices;
  run(args: string[], over: Partial<HostEnv>): Promise<{ exit: number; out: string }>;
}

/** node n1 installed at OLD against a control plane with a private CA (--ca-file, so etc/control-plane-ca.pem written). */
async function installedWithPrivateCa(t: Test, caPem: string): Promise<Host> {
  const root = mkdtempSync(join(tmpdir(), 'zn-cafile-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  const run = async (args: string[], over: Partial<HostEnv>): Promise<{ exit: number; out: string }> => {
    const cli = captureCli(work);
    const exit = await runInstall(['node', ...args], cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services, ...over }));
    return { exit, out: cli.out() + cli.err() };
  };
  const caFile = join(work, `private-ca-${Math.random()}.pem`);
  writeFileSync(caFile, caPem);
  const old = await buildNodePackage(work, keys, { name: `old-${Math.random()}.zpkg`, version: OLD });
  const installed = await run(['--package', old.file, '--control-plane', 'https://cp-a.example.test', '--token', 'tok_install', '--ca-file', caFile], {
    enroll: enrollLikeTheNode(),
    probeControlPlane: healthyControlPlane({ version: OLD }),
  });
  if (!t.equal(installed.exit, 0, 'installed with a private CA')) t.comment(installed.out);
  t.equal(readFileSync(join(root, CA_FILE), 'utf8'), caPem, 'the install wrote the CA file');
  return { root, oldPackage: old.file, services, run };
}

async function newPackage(): Promise<string> {
  return (await buildNodePackage(work, keys, { name: `new-${Math.random()}.zpkg` })).file;
}

t.test('a re-enrollment without --ca-file removes the installed CA file, and a later --upgrade without one trusts the system trust store', async (t) => {
  const h = await installedWithPrivateCa(t, (await createTestCa()).certPem);
  const re = await h.run(['--package', h.oldPackage, '--reenroll', '--control-plane', 'https://cp-b.example.test', '--token', 'tok_reenroll'], {
    enroll: enrollLikeTheNode(),
    probeControlPlane: healthyControlPlane({ version: OLD }),
  });
  if (!t.equal(re.exit, 0)) t.comment(re.out);
  t.notOk(existsSync(join(h.root, CA_FILE)), 'the CA of the old control plane is gone');
  t.match(re.out, /✓ \/opt\/zenova-node\/etc\/control-plane-ca\.pem removed: this control plane is verified with this host's system trust store/);

  const seen: Array<{ caPem: string | undefined; caFile: string | undefined }> = [];
  const up = await h.run(['--package', await newPackage(), '--control-plane', 'https://cp-b.example.test', '--token', 'tok_upgrade', '--upgrade'], {
    probeControlPlane: recordingProbe(productVersion(), seen),
    redeemUpgrade: redeemOk,
  });
  if (!t.equal(up.exit, 0)) t.comment(up.out);
  t.same(seen, [{ caPem: undefined, caFile: undefined }], 'the upgrade asked with no CA: the system trust store');
});

t.test('a re-enrollment with --ca-file replaces the installed CA file with it', async (t) => {
  const h = await installedWithPrivateCa(t, (await createTestCa()).certPem);
  const next = (await createTestCa()).certPem;
  const nextFile = join(work, `next-ca-${Math.random()}.pem`);
  writeFileSync(nextFile, next);
  const re = await h.run(['--package', h.oldPackage, '--reenroll', '--control-plane', 'https://cp-b.example.test', '--token', 'tok_reenroll', '--ca-file', nextFile], {
    enroll: enrollLikeTheNode(),
    probeControlPlane: healthyControlPlane({ version: OLD }),
  });
  if (!t.equal(re.exit, 0)) t.comment(re.out);
  t.equal(readFileSync(join(h.root, CA_FILE), 'utf8'), next);
});

t.test('a refused re-enrollment leaves the installed CA file as it was', async (t) => {
  const caPem = (await createTestCa()).certPem;
  const h = await installedWithPrivateCa(t, caPem);
  const re = await h.run(['--package', h.oldPackage, '--reenroll', '--control-plane', 'https://cp-b.example.test', '--token', 'tok_reenroll'], {
    enroll: enrollLikeTheNode({ on: true }),
    probeControlPlane: healthyControlPlane({ version: OLD }),
  });
  t.equal(re.exit, 1);
  t.match(re.out, /NODE-TOKEN-REJECTED/);
  t.equal(readFileSync(join(h.root, CA_FILE), 'utf8'), caPem, 'the previous identity and its CA file stay together');
});

t.test('a re-enrollment whose CA file cannot be written names that file and starts node-edge again', async (t) => {
  const h = await installedWithPrivateCa(t, (await createTestCa()).certPem);
  const next = (await createTestCa()).certPem;
  const nextFile = join(work, `next-ca-${Math.random()}.pem`);
  writeFileSync(nextFile, next);
  // A directory in the CA file's place: the atomic rename onto it fails (EISDIR), even as root.
  rmSync(join(h.root, CA_FILE));
  mkdirSync(join(h.root, CA_FILE, 'x'), { recursive: true });
  h.services.calls.length = 0;
  const re = await h.run(['--package', h.oldPackage, '--reenroll', '--control-plane', 'https://cp-b.example.test', '--token', 'tok_reenroll', '--ca-file', nextFile], {
    enroll: enrollLikeTheNode(),
    probeControlPlane: healthyControlPlane({ version: OLD }),
  });
  t.equal(re.exit, 1);
  t.match(re.out, /NODE-WRITE-FAILED: could not write \/opt\/zenova-node\/etc\/control-plane-ca\.pem: E/);
  t.notMatch(re.out, /NODE-SERVICE-START/);
  t.same(h.services.calls, ['enable node-edge.service', 'stop node-edge.service', 'start node-edge.service'], 'node-edge is not left stopped');
  t.equal(h.services.states.get('node-edge.service'), 'active');
});

t.test('an --upgrade without --ca-file of a node re-enrolled to the system trust store by an earlier installer ignores the CA file that one left', async (t) => {
  const h = await installedWithPrivateCa(t, (await createTestCa()).certPem);
  // What an earlier installer's --reenroll without --ca-file left: the identity without a CA, the file kept.
  const identity = JSON.parse(readFileSync(join(h.root, IDENTITY), 'utf8')) as Record<string, unknown>;
  delete identity['controlPlaneCaPem'];
  writeFileSync(join(h.root, IDENTITY), JSON.stringify(identity));
  const seen: Array<{ caPem: string | undefined; caFile: string | undefined }> = [];
  const up = await h.run(['--package', await newPackage(), '--control-plane', 'https://cp-b.example.test', '--token', 'tok_upgrade', '--upgrade'], {
    probeControlPlane: recordingProbe(productVersion(), seen),
    redeemUpgrade: redeemOk,
  });
  if (!t.equal(up.exit, 0)) t.comment(up.out);
  t.same(seen, [{ caPem: undefined, caFile: undefined }], 'trusted as the node does: the system trust store');
});

t.test('an --upgrade without --ca-file trusts the installed CA file its identity holds, and names it as the installed CA file when it does not verify', async (t) => {
  const caPem = (await createTestCa()).certPem;
  const h = await installedWithPrivateCa(t, caPem);
  const pkg = await newPackage();
  const file = join(h.root, CA_FILE);

  // A control plane whose certificate comes from another CA: the real probe refuses it.
  const server = await fakePreflightServer(t, () => ({ product: 'zenova-gateway', version: productVersion(), protocolVersion: PROTOCOL_VERSION, serverTime: new Date().toISOString(), serverTimeMs: Date.now() }));
  const refused = await h.run(['--package', pkg, '--control-plane', server.url, '--token', 'tok_upgrade_1', '--upgrade'], { probeControlPlane, redeemUpgrade: redeemOk });
  t.equal(refused.exit, 1);
  t.match(refused.out, `✗ NODE-CP-TLS: the control plane's certificate is not trusted (checked against the installed CA file (${file}))`);
  t.match(refused.out, `${file}, the CA the node was installed or re-enrolled with, is not the CA that signed the control plane's certificate`);
  t.notMatch(refused.out, `--ca-file ${file}`, 'never called a --ca-file the operator did not pass');

  const seen: Array<{ caPem: string | undefined; caFile: string | undefined }> = [];
  const up = await h.run(['--package', pkg, '--control-plane', 'https://cp-a.example.test', '--token', 'tok_upgrade_2', '--upgrade'], {
    probeControlPlane: recordingProbe(productVersion(), seen),
    redeemUpgrade: redeemOk,
  });
  if (!t.equal(up.exit, 0)) t.comment(up.out);
  t.same(seen, [{ caPem, caFile: file }], 'the installed CA');
});
