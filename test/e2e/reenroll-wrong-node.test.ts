/**
 * `zenova-node enroll --reenroll` with another node's reenroll token (the wrong row's command pasted
 * on a host that holds a live node), end to end with real processes, PostgreSQL and TLS: refused
 * with ZN_ERR_CP_TOKEN_WRONG_NODE in one line that names the host's node and what to do; the other
 * node's credential keeps working, the host's state dir is left exactly as it was, and the token
 * stays usable. Its own reenroll token, and a host whose node was deleted and created again, still
 * re-enroll.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { createNode, enrollNewNode, httpsMaterial, runEnroll, startControlPlane, tempDir, tokenOf, tryControlStream, type ControlPlane } from './stack.js';

let cp: ControlPlane;
let work: string;

t.before(async () => {
  const db = await testDatabase(t);
  work = tempDir(t, 'zn-e2e-reenroll-wrong-node-');
  const https = await httpsMaterial(join(work, 'https'));
  cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gateway-tls') });
});

interface Identity { nodeId: string; nodeName: string; gateway: { target: string; serverName: string; caPem?: string } }

const identityOf = (dir: string): Identity => JSON.parse(readFileSync(join(dir, 'identity.json'), 'utf8')) as Identity;
const credentialOf = (dir: string): string => (JSON.parse(readFileSync(join(dir, 'credential.json'), 'utf8')) as { current: { secret: string } }).current.secret;

/** Whether the gateway accepts the credential saved in `dir` (or the refusal code). */
async function controlStreamOf(dir: string, credential = credentialOf(dir)): Promise<{ accepted: boolean; code?: string }> {
  const id = identityOf(dir);
  return tryControlStream({ target: id.gateway.target, serverName: id.gateway.serverName, caPem: id.gateway.caPem!, nodeId: id.nodeId, credential });
}

/** Every entry under `dir` with its mode and content hash: what "unchanged" is checked against. */
function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (sub: string): void => {
    for (const e of readdirSync(join(dir, sub), { withFileTypes: true })) {
      const rel = join(sub, e.name);
      const st = statSync(join(dir, rel));
      if (e.isDirectory()) {
        out[`${rel}/`] = st.mode.toString(8);
        walk(rel);
      } else {
        out[rel] = `${st.mode.toString(8)} ${createHash('sha256').update(readFileSync(join(dir, rel))).digest('hex')}`;
      }
    }
  };
  walk('');
  return out;
}

async function reenrollCommandToken(name: string): Promise<string> {
  const res = await cp.api<{ command: string }>('POST', `/api/v1/nodes/${name}/reenroll-command`, {});
  if (res.status !== 200) throw new Error(`reenroll-command ${name}: ${res.status} ${JSON.stringify(res.body)}`);
  return tokenOf(res.body.command);
}

t.test('another live node\'s reenroll token with --reenroll is refused with TOKEN_WRONG_NODE: nothing revoked, the state dir unchanged, the token still usable', async (t) => {
  const dirX = join(work, 'x');
  const dirY = join(work, 'y');
  const x = await enrollNewNode(t, cp, 'qa-x', dirX);
  const y = await enrollNewNode(t, cp, 'qa-y', dirY);
  const yToken = await reenrollCommandToken('qa-y');
  const before = snapshot(dirX);

  const r = await runEnroll(t, { url: cp.url, token: yToken, stateDir: dirX, caFile: cp.https.caFile, extra: ['--reenroll'] });
  t.not(r.code, 0, 'exits non-zero');
  t.match(r.output, 'ZN_ERR_CP_TOKEN_WRONG_NODE');
  t.match(r.output, `another node than node qa-x (${x.node.id}), which this host holds`, 'names the node this host holds');
  t.match(r.output, '`zenova gateway-node reenroll-command qa-x`', 'advises its own reenroll command');
  t.match(r.output, '`zenova gateway-node delete qa-x --yes`', 'or deleting it first');
  t.notOk(r.output.includes(yToken), 'the token is not printed');

  t.same(snapshot(dirX), before, "the host's state dir is unchanged");
  t.notOk(existsSync(join(dirX, 'retired')), 'nothing moved into retired/');
  t.same(await controlStreamOf(dirY), { accepted: true }, "the token's node keeps its credential");
  t.same(await controlStreamOf(dirX), { accepted: true }, "the host's node keeps its credential");

  // The token was not used: on Y's own host it re-enrolls Y.
  const yCredential = credentialOf(dirY);
  const own = await runEnroll(t, { url: cp.url, token: yToken, stateDir: dirY, caFile: cp.https.caFile, extra: ['--reenroll'] });
  t.equal(own.code, 0, own.output.slice(-500));
  t.equal(identityOf(dirY).nodeId, y.node.id, 'still node qa-y');
  t.notOk(existsSync(join(dirY, 'retired')), 'its own node keeps its state in place');
  t.same(await controlStreamOf(dirY), { accepted: true }, 'the new credential works');
  t.match(await controlStreamOf(dirY, yCredential), { accepted: false, code: 'CREDENTIAL_REVOKED' }, 'the one it replaced is revoked');
});

t.test('a host whose node was deleted and created again re-enrolls with the new node\'s reenroll token, its old state moved to retired/', async (t) => {
  const dir = join(work, 'z');
  const old = await enrollNewNode(t, cp, 'qa-z', dir);
  t.equal((await cp.api('DELETE', '/api/v1/nodes/qa-z')).status, 200);
  const created = await createNode(cp, 'qa-z');
  t.not(created.node.id, old.node.id, 'a new node id');
  const r = await runEnroll(t, { url: cp.url, token: await reenrollCommandToken('qa-z'), stateDir: dir, caFile: cp.https.caFile, extra: ['--reenroll'] });
  t.equal(r.code, 0, r.output.slice(-500));
  t.equal(identityOf(dir).nodeId, created.node.id, 'the state dir holds the new node');
  t.ok(existsSync(join(dir, 'retired')), "the old node's state is moved to retired/");
  t.same(await controlStreamOf(dir), { accepted: true });
});
