/**
 * The enrollment API against real PostgreSQL: preflight, one-time redemption with distinct token
 * errors (unknown, expired, used, wrong kind, node deleted), the row lock that lets exactly one of
 * two concurrent redemptions win, the per-IP rate limit, and reenroll revoking old credentials.
 */
import { createHash } from 'node:crypto';
import t from 'tap';
import { verifyCredential } from '../../control-plane/src/nodes/credentials.js';
import { issueInstallToken, redeemInstallToken } from '../../control-plane/src/nodes/install-tokens.js';
import { withTransaction } from '../../control-plane/src/nodes/with-transaction.js';
import { PROTOCOL_VERSION } from '../../proto/src/protocol-version.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import {
  bearer, createNode, enroll, FACTS, issue, listenNodeEvents, migratedPool, nodesApp, STUB_GATEWAY, STUB_SIGNING_KEY_PEM,
} from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { app, settings, log } = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 1_000 } });

interface ErrorBody { error: { code: string; type: string; message: string } }
interface Enrolled {
  nodeId: string; nodeName: string;
  credential: { id: string; secret: string; expiresAt: string };
  gateway: typeof STUB_GATEWAY; configSigningPublicKeyPem: string; controlPlaneUrl: string;
}

async function tokenState(token: string): Promise<{ used: boolean }> {
  const { rows } = await pool.query<{ used: boolean }>('select used_at is not null as used from install_tokens where token_hash = $1',
    [createHash('sha256').update(token).digest()]);
  return rows[0]!;
}

t.test('preflight answers without a token: product, version, protocol and server time', async (t) => {
  const before = Date.now();
  const res = await app.inject({ method: 'GET', url: '/api/enroll/preflight' });
  const after = Date.now();
  t.equal(res.statusCode, 200);
  const body = res.json<{ product: string; version: string; protocolVersion: number; serverTime: string; serverTimeMs: number }>();
  t.match(body, { product: 'zenova-gateway', protocolVersion: PROTOCOL_VERSION });
  t.match(body.version, /^\d+\.\d+\.\d+/);
  t.ok(body.serverTimeMs >= before && body.serverTimeMs <= after, 'the server clock, for the skew check');
  t.equal(Date.parse(body.serverTime), body.serverTimeMs);
});

t.test('an install token enrolls its node once, with the credential and the gateway information', async (t) => {
  const created = await createNode(app, { controlPlaneUrl: 'https://cp.example.com:7443' });
  const before = Date.now();
  const res = await enroll(app, created.install.token);
  t.equal(res.statusCode, 200, res.body);
  const body = res.json<Enrolled>();
  t.equal(body.nodeId, created.node.id);
  t.equal(body.nodeName, created.node.name);
  t.same(body.gateway, STUB_GATEWAY, 'gateway target, server name and CA from the injected dependency');
  t.equal(body.configSigningPublicKeyPem, STUB_SIGNING_KEY_PEM);
  t.equal(body.controlPlaneUrl, 'https://cp.example.com:7443');
  t.match(body.credential.secret, new RegExp(`^${body.credential.id}\\.[A-Za-z0-9_-]{43}$`), '<credentialId>.<secret>');
  const validFor = Date.parse(body.credential.expiresAt) - before;
  t.ok(validFor >= settings.nodes.credentialValidityMs - 60_000 && validFor <= settings.nodes.credentialValidityMs + 60_000,
    'the credential is valid for the configured validity');
  t.match(await verifyCredential(pool, body.nodeId, body.credential.secret), { ok: true, nodeId: created.node.id, isNewest: true });
  t.same(await tokenState(created.install.token), { used: true });
  t.notOk(log.text().includes(created.install.token.slice(6)), 'the token is not in the log');
  t.notOk(log.text().includes(body.credential.secret.split('.')[1]!), 'the credential secret is not in the log');

  const again = await enroll(app, created.install.token);
  t.equal(again.statusCode, 409);
  t.match(again.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_TOKEN_USED', type: 'conflict_error', message: /already used/ } });
  t.match(await verifyCredential(pool, body.nodeId, body.credential.secret), { ok: true }, 'a replay does not disturb the enrolled node');
});

t.test('an expired token is refused with TOKEN_EXPIRED', async (t) => {
  const created = await createNode(app);
  const hourAgo = new Date(Date.now() - 3_600_000);
  const expired = await withTransaction(pool, (client) => issueInstallToken(client, created.node.id, 'install', 60_000, hourAgo));
  const res = await enroll(app, expired!.token);
  t.equal(res.statusCode, 401);
  t.match(res.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_TOKEN_EXPIRED', type: 'authentication_error', message: /expired at/ } });
  t.same(await tokenState(expired!.token), { used: false });
});

t.test('an unknown token is refused with TOKEN_UNKNOWN', async (t) => {
  for (const token of [`zn_it_${'A'.repeat(43)}`, 'not-even-a-token']) {
    const res = await enroll(app, token);
    t.equal(res.statusCode, 401, token);
    t.match(res.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_TOKEN_UNKNOWN', type: 'authentication_error' } }, token);
    t.notOk(res.body.includes(token), 'the token is not echoed');
  }
});

t.test('a token of the wrong kind is refused with TOKEN_WRONG_KIND and stays usable', async (t) => {
  const created = await createNode(app);
  const installAsReenroll = await enroll(app, created.install.token, { mode: 'reenroll' });
  t.equal(installAsReenroll.statusCode, 400);
  t.match(installAsReenroll.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_TOKEN_WRONG_KIND', message: /This is an install token/ } });
  t.same(await tokenState(created.install.token), { used: false }, 'not consumed');

  const reenroll = (await issue(app, created.node.name, 'reenroll')).json<{ token: string }>().token;

  const upgrade = (await issue(app, created.node.name, 'upgrade')).json<{ token: string }>().token;
  for (const mode of ['install', 'reenroll'] as const) {
    const res = await enroll(app, upgrade, { mode });
    t.equal(res.statusCode, 400, `upgrade token, mode ${mode}`);
    t.match(res.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_TOKEN_WRONG_KIND', message: /upgrade token.*cannot enroll/ } });
  }
  t.equal((await enroll(app, created.install.token)).statusCode, 200, 'the install token still enrolls in its own mode');
  t.equal((await enroll(app, reenroll, { mode: 'reenroll' })).statusCode, 200, 'and the reenroll token in its own');
});

t.test('a reenroll token run without --reenroll enrolls a replacement host (seed 004 §9.6)', async (t) => {
  const created = await createNode(app);
  t.equal((await enroll(app, created.install.token)).statusCode, 200);
  const reenroll = (await issue(app, created.node.name, 'reenroll')).json<{ token: string }>().token;
  const replacement = await enroll(app, reenroll, { mode: 'install' });
  t.equal(replacement.statusCode, 200, replacement.body);
});

t.test('a token of a deleted node is refused with NODE_DELETED', async (t) => {
  const created = await createNode(app);
  t.equal((await app.inject({ method: 'DELETE', url: `/api/v1/nodes/${created.node.name}`, headers: bearer })).statusCode, 200);
  const res = await enroll(app, created.install.token);
  t.equal(res.statusCode, 410);
  t.match(res.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_NODE_DELETED', message: /deleted/ } });
});

t.test('two concurrent redemptions of one token: the second waits on the row lock and sees it used', async (t) => {
  const created = await createNode(app);
  const first = await pool.connect();
  const second = await pool.connect();
  t.teardown(() => { first.release(); second.release(); });
  await first.query('begin');
  await second.query('begin');
  const won = await redeemInstallToken(first, created.install.token, ['install']);
  t.match(won, { ok: true, nodeId: created.node.id });
  const { rows } = await second.query<{ pid: number }>('select pg_backend_pid() as pid');
  const secondPid = rows[0]!.pid;
  const racing = redeemInstallToken(second, created.install.token, ['install']);
  await waitFor(async () => (await pool.query('select 1 from pg_locks where pid = $1 and not granted', [secondPid])).rowCount,
    { what: 'the second redemption to wait on the token row lock' });
  await first.query('commit');
  const lost = await racing;
  await second.query('commit');
  t.match(lost, { ok: false, reason: 'used' });
});

t.test('many concurrent enrollments with one token: exactly one succeeds, the rest are TOKEN_USED', async (t) => {
  const created = await createNode(app);
  const results = await Promise.all(Array.from({ length: 5 }, () => enroll(app, created.install.token)));
  const codes = results.map((r) => r.statusCode).sort();
  t.same(codes, [200, 409, 409, 409, 409]);
  for (const r of results.filter((x) => x.statusCode === 409)) t.equal(r.json<ErrorBody>().error.code, 'ZN_ERR_CP_TOKEN_USED');
  const { rows } = await pool.query('select 1 from node_credentials where node_id = $1', [created.node.id]);
  t.equal(rows.length, 1, 'one credential was issued');
});

t.test('reenroll revokes the node\'s old credentials, tells every replica, and starts onboarding over', async (t) => {
  const listener = await listenNodeEvents(t, db.url);
  const created = await createNode(app);
  const first = (await enroll(app, created.install.token)).json<Enrolled>();
  await pool.query(`update nodes set onboarding_stage = 'first-heartbeat' where id = $1`, [created.node.id]);
  const reenroll = (await issue(app, created.node.name, 'reenroll')).json<{ token: string }>().token;
  const res = await enroll(app, reenroll, { mode: 'reenroll', facts: { ...FACTS, hostname: 'replacement-host' } });
  t.equal(res.statusCode, 200, res.body);
  const second = res.json<Enrolled>();
  t.equal(second.nodeId, first.nodeId, 'the same node identity');
  t.not(second.credential.id, first.credential.id);
  t.match(await verifyCredential(pool, first.nodeId, first.credential.secret), { ok: false, code: 'CREDENTIAL_REVOKED' });
  t.match(await verifyCredential(pool, second.nodeId, second.credential.secret), { ok: true, isNewest: true });
  const event = await waitFor(() => listener.events.find((e) => e.nodeId === created.node.id),
    { what: 'the credentials-revoked notification', timeoutMs: 10_000 });
  t.same(event, { type: 'credentials-revoked', nodeId: created.node.id });
  const view = (await app.inject({ method: 'GET', url: `/api/v1/nodes/${created.node.name}`, headers: bearer })).json();
  t.match(view, { onboardingStage: 'registered', hostname: 'replacement-host' });
});

t.test('an incompatible protocol version is refused before the token is touched', async (t) => {
  const created = await createNode(app);
  const res = await enroll(app, created.install.token, { facts: { ...FACTS, protocolVersion: PROTOCOL_VERSION + 1 } });
  t.equal(res.statusCode, 400);
  t.match(res.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_PROTOCOL_INCOMPATIBLE', message: /protocol mismatch.*upgrade this side/ } });
  t.same(await tokenState(created.install.token), { used: false });
});

t.test('without the gateway dependency enrollment answers 503, and a failing dependency burns no token', async (t) => {
  const bare = await nodesApp(t, db.url, { enrollment: null });
  const created = await createNode(bare.app);
  const res = await enroll(bare.app, created.install.token);
  t.equal(res.statusCode, 503);
  t.equal(res.json<ErrorBody>().error.code, 'ZN_ERR_CP_ENROLLMENT_UNAVAILABLE');
  const broken = await nodesApp(t, db.url, {
    enrollment: { gatewayInfo: async () => { throw new Error('gateway identity not loaded'); }, configSigningPublicKeyPem: async () => 'x' },
  });
  const failed = await enroll(broken.app, created.install.token);
  t.equal(failed.statusCode, 500);
  t.notOk(failed.body.includes('gateway identity not loaded'), 'internals stay in the log');
  t.same(await tokenState(created.install.token), { used: false });
  t.equal((await enroll(app, created.install.token)).statusCode, 200, 'the token still works where a gateway runs');
});

t.test('enrollment bodies are validated strictly and size-limited', async (t) => {
  const cases: Array<[unknown, RegExp]> = [
    [{ token: 'x', mode: 'install', facts: FACTS, extra: 1 }, /extra|[Uu]nrecognized/],
    // Each states the rule the value breaks, not zod's "Invalid input: expected string, received undefined".
    [{ token: 'x', mode: 'upgrade', facts: FACTS }, /^body field 'mode': must be one of install, reenroll$/],
    [{ token: 'x', mode: 'install' }, /^body field 'facts': must be an object of hostname, arch, version and protocolVersion$/],
    [{ token: 'x', mode: 'install', facts: { ...FACTS, hostname: 'bad host' } }, /^body field 'facts.hostname': must be a host name/],
    [{ token: 'x', mode: 'install', facts: { ...FACTS, hostname: undefined } }, /^body field 'facts.hostname': must be a host name/],
    [{ token: 'x', mode: 'install', facts: { ...FACTS, protocolVersion: 1.5 } }, /^body field 'facts.protocolVersion': must be an integer from 0 to/],
    [{ token: 'x'.repeat(300), mode: 'install', facts: FACTS }, /^body field 'token': must be the token of a one-time command/],
    [{ mode: 'install', facts: FACTS }, /^body field 'token': must be the token of a one-time command/],
  ];
  for (const [payload, message] of cases) {
    const res = await app.inject({ method: 'POST', url: '/api/enroll', payload: payload as object });
    t.equal(res.statusCode, 400, JSON.stringify(payload).slice(0, 80));
    t.match(res.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message } });
  }
  const huge = await app.inject({ method: 'POST', url: '/api/enroll', payload: { token: 'x', mode: 'install', facts: { ...FACTS, hostname: 'h'.repeat(20_000) } } });
  t.equal(huge.statusCode, 413);
});

t.test('behind a proxy named in ZENOVA_TRUSTED_PROXIES each client has its own enrollment budget; X-Forwarded-For from anyone else is ignored', async (t) => {
  const proxy = '10.7.0.1';
  const behind = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 2 }, trustedProxies: ['10.7.0.0/24'] });
  for (let i = 1; i <= 2; i++) t.equal((await enroll(behind.app, `zn_it_junk-${i}`, { remoteAddress: proxy, forwardedFor: '198.51.100.7' })).statusCode, 401, `junk attempt ${i} of one client`);
  t.equal((await enroll(behind.app, 'zn_it_junk-3', { remoteAddress: proxy, forwardedFor: '198.51.100.7' })).statusCode, 429, 'that client is limited');
  const created = await createNode(behind.app);
  t.equal((await enroll(behind.app, created.install.token, { remoteAddress: proxy, forwardedFor: '198.51.100.8' })).statusCode, 200, 'another client through the same proxy enrolls');
  // A client that is not a trusted proxy cannot pick its own budget with the header.
  for (let i = 1; i <= 2; i++) await enroll(behind.app, `zn_it_spoof-${i}`, { remoteAddress: '203.0.113.9', forwardedFor: `192.0.2.${i}` });
  t.equal((await enroll(behind.app, 'zn_it_spoof-3', { remoteAddress: '203.0.113.9', forwardedFor: '192.0.2.3' })).statusCode, 429, 'an untrusted peer is counted by its own address');

  const direct = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 2 } });
  for (let i = 1; i <= 2; i++) await enroll(direct.app, `zn_it_direct-${i}`, { remoteAddress: proxy, forwardedFor: `198.51.100.${i}` });
  t.equal((await enroll(direct.app, 'zn_it_direct-3', { remoteAddress: proxy, forwardedFor: '198.51.100.3' })).statusCode, 429, 'without the setting, X-Forwarded-For is never believed');
});

t.test('enrollment attempts are rate limited per client IP with 429 and Retry-After', async (t) => {
  const limited = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 3 } });
  const created = await createNode(limited.app);
  for (let i = 1; i <= 3; i++) {
    const res = await enroll(limited.app, `zn_it_guess-${i}`, { remoteAddress: '10.9.9.1' });
    t.equal(res.statusCode, 401, `attempt ${i} is let through (and fails on its merits)`);
  }
  const blocked = await enroll(limited.app, created.install.token, { remoteAddress: '10.9.9.1' });
  t.equal(blocked.statusCode, 429, 'the fourth attempt in the minute is refused, even with a good token');
  t.match(blocked.json<ErrorBody>(), { error: { code: 'ZN_ERR_CP_ENROLL_RATE_LIMITED', type: 'rate_limit_error' } });
  const retryAfter = Number(blocked.headers['retry-after']);
  t.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After ${blocked.headers['retry-after']} is 1..60 s`);
  t.same(await tokenState(created.install.token), { used: false }, 'a refused attempt does not touch the token');
  const bad = await limited.app.inject({ method: 'POST', url: '/api/enroll', payload: { nonsense: true }, remoteAddress: '10.9.9.1' });
  t.equal(bad.statusCode, 429, 'malformed attempts count and are refused too');
  const other = await enroll(limited.app, created.install.token, { remoteAddress: '10.9.9.2' });
  t.equal(other.statusCode, 200, 'another address has its own budget');
  const preflight = await limited.app.inject({ method: 'GET', url: '/api/enroll/preflight', remoteAddress: '10.9.9.1' });
  t.equal(preflight.statusCode, 200, 'preflight is not limited');
});

t.test('an IPv6 client has one enrollment budget for its whole /64, and an IPv4-mapped address shares its IPv4 budget', async (t) => {
  const limited = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 2 } });
  // One host with a /64 picks a fresh address for every attempt: still one budget.
  for (let i = 1; i <= 2; i++) {
    t.equal((await enroll(limited.app, `zn_it_v6-${i}`, { remoteAddress: `2001:db8:1:2::${i}` })).statusCode, 401, `attempt ${i} from the /64`);
  }
  const spread = await enroll(limited.app, 'zn_it_v6-3', { remoteAddress: '2001:db8:1:2:ffff:ffff:ffff:3' });
  t.equal(spread.statusCode, 429, 'another address in the same /64 is refused');
  t.equal((await enroll(limited.app, 'zn_it_v6-4', { remoteAddress: '2001:db8:1:3::1' })).statusCode, 401, 'the next /64 has its own budget');

  for (let i = 1; i <= 2; i++) await enroll(limited.app, `zn_it_v4-${i}`, { remoteAddress: '10.9.8.7' });
  const mapped = await enroll(limited.app, 'zn_it_v4-3', { remoteAddress: '::ffff:10.9.8.7' });
  t.equal(mapped.statusCode, 429, 'the IPv4-mapped form of a limited IPv4 address is limited too');
});
