/**
 * --reenroll stops node-edge only when it has to. Against a control plane that answers a redemption
 * again for the same key, a serving node keeps serving while the token is redeemed: a refused token
 * never stops it; the same node re-enrolled is restarted once with its new identity; a token of
 * another node, refused while the old node holds its spool (PREVIOUS_NODE_SERVING), stops it and is
 * redeemed again, and a failure after that stop starts the old node again. A node-edge that cannot
 * be started again is reported as such, never as running. The enrollment and the service manager
 * are stand-ins (test/e2e/install-node.test.ts runs the real ones).
 */
import t from 'tap';
import type { Test } from 'tap';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { EnrollError } from '../../edge-node/src/enroll/enroll-errors.js';
import type { ControlPlaneProbe } from '../../installer/src/install/control-plane-probe.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import { captureCli, fakeServices, healthyControlPlane, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-reserve-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const UNIT = 'node-edge.service';
const DATA = 'opt/zenova-node/data';

let pkg = '';
t.before(async () => {
  pkg = (await buildNodePackage(work, keys)).file;
});

/** A control plane of this release: it takes redemption keys (its preflight says so). */
const retryingControlPlane: ControlPlaneProbe = async (url, caPem, caFile) => {
  const answer = await healthyControlPlane()(url, caPem, caFile);
  return answer.ok ? { ok: true, facts: { ...answer.facts, redemptionKeys: true } } : answer;
};

function saveIdentity(stateDir: string, nodeId: string): Awaited<ReturnType<Enroller>> {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(join(stateDir, 'identity.json'), JSON.stringify({ nodeId, nodeName: 'n1' }));
  return { nodeId, nodeName: 'n1', controlPlaneUrl: 'https://cp.example.test', gatewayTarget: 'gw:8443', stateDir, reenrolled: true };
}

/** Node n1 installed and serving (the fake unit active), its service calls cleared. */
async function servingNode(t: Test): Promise<{ root: string; services: ReturnType<typeof fakeServices> }> {
  const root = mkdtempSync(join(tmpdir(), 'zn-reserve-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_INSTALL0001'], cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: async (o) => saveIdentity(o.stateDir, 'id-old') }));
  if (!t.equal(exit, 0, 'installed')) t.comment(cli.out());
  t.equal(await services.state(UNIT), 'active', 'node-edge serves');
  services.calls.length = 0;
  return { root, services };
}

async function reenroll(root: string, services: ReturnType<typeof fakeServices>, enroll: Enroller, probe: ControlPlaneProbe = retryingControlPlane): Promise<{ exit: number; out: string }> {
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg, '--reenroll', '--control-plane', 'https://cp.example.test', '--token', 'zn_it_REENROLL001'], cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll, probeControlPlane: probe }));
  return { exit, out: cli.out() };
}

const nodeEdgeCalls = (services: ReturnType<typeof fakeServices>): string[] => services.calls.filter((c) => c.endsWith(UNIT) && !c.startsWith('enable'));

t.test('a refused token never stops a serving node: it serves on with its identity untouched', async (t) => {
  const { root, services } = await servingNode(t);
  const identity = readFileSync(join(root, DATA, 'identity.json'), 'utf8');
  const statesAtRedemption: string[] = [];
  const refused: Enroller = async () => {
    statesAtRedemption.push(await services.state(UNIT));
    throw new EnrollError('ZN_ERR_CP_TOKEN_USED', 'the token was already used (ZN_ERR_CP_TOKEN_USED)');
  };
  const r = await reenroll(root, services, refused);
  t.equal(r.exit, 1);
  t.match(r.out, /✗ NODE-TOKEN-REJECTED: the token was already used/);
  t.same(statesAtRedemption, ['active'], 'node-edge served while the token was redeemed');
  t.same(nodeEdgeCalls(services), [], 'node-edge was never stopped, started or restarted');
  t.equal(await services.state(UNIT), 'active', 'it still serves');
  t.match(r.out, /node-edge\.service was never stopped: it serves on with its previous identity/);
  t.equal(readFileSync(join(root, DATA, 'identity.json'), 'utf8'), identity, 'its identity is untouched');
});

t.test('the same node re-enrolled while it serves is restarted once, with its new identity', async (t) => {
  const { root, services } = await servingNode(t);
  const statesAtRedemption: string[] = [];
  const sameNode: Enroller = async (o) => {
    statesAtRedemption.push(await services.state(UNIT));
    return saveIdentity(o.stateDir, 'id-old');
  };
  const r = await reenroll(root, services, sameNode);
  t.equal(r.exit, 0, r.out);
  t.same(statesAtRedemption, ['active']);
  t.same(nodeEdgeCalls(services), [`restart ${UNIT}`], 'one restart after the identity was saved, no stop before');
  t.match(r.out, /node-edge\.service restarted with the new identity/);
});

t.test("another node's token stops the serving node only once it is refused for holding the old spool, then is redeemed again", async (t) => {
  const { root, services } = await servingNode(t);
  const seen: Array<{ state: string; calls: number }> = [];
  const anotherNode: Enroller = async (o) => {
    const state = await services.state(UNIT);
    seen.push({ state, calls: nodeEdgeCalls(services).length });
    // As enroll() does: redeemed, but the old node's state is not moved while its spool is held open.
    if (state === 'active') throw new EnrollError('PREVIOUS_NODE_SERVING', 'a node-edge process still serves node n1 (id-old): stop it before enrolling this state dir as node id-new');
    return { ...saveIdentity(o.stateDir, 'id-new'), retired: { dir: 'retired/n1-id-old-20250101T000000Z', moved: ['spool.db'], undelivered: 0, nodeId: 'id-old', nodeName: 'n1' } };
  };
  const r = await reenroll(root, services, anotherNode);
  t.equal(r.exit, 0, r.out);
  t.same(seen, [{ state: 'active', calls: 0 }, { state: 'inactive', calls: 1 }], 'redeemed while serving, then again once stopped');
  t.same(nodeEdgeCalls(services), [`stop ${UNIT}`, `start ${UNIT}`]);
  t.match(r.out, /the token is another node's: node-edge\.service is stopped now/);
  t.notMatch(r.out, /PREVIOUS_NODE_SERVING|✗/, 'the first refusal is no failure');
  t.match(JSON.parse(readFileSync(join(root, DATA, 'identity.json'), 'utf8')), { nodeId: 'id-new' });
});

t.test("stopped for another node's token and then failing, the old node is started again with its previous identity", async (t) => {
  const { root, services } = await servingNode(t);
  const identity = readFileSync(join(root, DATA, 'identity.json'), 'utf8');
  const anotherThenUnreachable: Enroller = async () => {
    if ((await services.state(UNIT)) === 'active') throw new EnrollError('PREVIOUS_NODE_SERVING', 'a node-edge process still serves node n1');
    throw new EnrollError('UNREACHABLE', 'cannot reach the control plane at cp.example.test: connect ECONNRESET');
  };
  const r = await reenroll(root, services, anotherThenUnreachable);
  t.equal(r.exit, 1);
  t.match(r.out, /✗ NODE-ENROLL-FAILED: cannot reach the control plane/);
  t.same(nodeEdgeCalls(services), [`stop ${UNIT}`, `start ${UNIT}`]);
  t.match(r.out, /node-edge\.service started again with its previous identity/);
  t.equal(await services.state(UNIT), 'active');
  t.equal(readFileSync(join(root, DATA, 'identity.json'), 'utf8'), identity);
});

t.test('a control plane not known to answer a redemption again: node-edge is stopped before the token is redeemed, and one that cannot be started again is reported, not claimed running', async (t) => {
  const { root, services } = await servingNode(t);
  const start = services.start.bind(services);
  let failStart = true;
  services.start = async (name) => {
    if (failStart && name === UNIT) throw Object.assign(new Error('Job for node-edge.service failed'), { code: 'EJOB' });
    await start(name);
  };
  const statesAtRedemption: string[] = [];
  const refused: Enroller = async () => {
    statesAtRedemption.push(await services.state(UNIT));
    throw new EnrollError('ZN_ERR_CP_TOKEN_EXPIRED', 'the token has expired (ZN_ERR_CP_TOKEN_EXPIRED)');
  };
  const r = await reenroll(root, services, refused, healthyControlPlane());
  t.equal(r.exit, 1);
  t.same(statesAtRedemption, ['inactive'], 'stopped first, as before');
  t.notMatch(r.out, /started again with its previous identity/, 'no claim that it runs');
  t.match(r.out, /✗ NODE-SERVICE-START: could not start node-edge\.service again with its previous identity: EJOB/);
  t.match(r.out, /Re-enrollment failed: NODE-TOKEN-REJECTED: the token has expired .*; and node-edge\.service, stopped for the re-enrollment, could not be started again \(EJOB\): start it with `systemctl start node-edge\.service`/);
  failStart = false;
});
