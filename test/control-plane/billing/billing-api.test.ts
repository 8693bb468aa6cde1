// The billing admin API and the lease handler of the node control stream, on real PostgreSQL.
import t from 'tap';
import { pino } from 'pino';
import type { ControlMessage } from '../../../proto/src/index.js';
import { createLeaseStreamHandler } from '../../../control-plane/src/billing/lease-stream-handler.js';
import { createNodeStreamHandlers } from '../../../control-plane/src/gateway/node-stream-handlers.js';
import { settleIngestedRecords } from '../../../control-plane/src/billing/settlement.js';
import { NodeMessageInvalid } from '../../../control-plane/src/gateway/node-stream-handler.js';
import { withTransaction } from '../../../control-plane/src/nodes/with-transaction.js';
import { migrate } from '../../../control-plane/src/db/migrate.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { configApp } from '../config-harness.js';
import { testSettings } from '../helpers.js';
import { insertAccount, insertNode } from './billing-fixtures.js';

t.test('billing admin API and lease stream handler', async (t) => {
  const db = await testDatabase(t);
  const { pool, call } = await configApp(t, db.url);
  await migrate(pool);

  t.test('credits top up the balance; the balance shows leases and spend', async (t) => {
    const accountId = await insertAccount(pool, 'acme');
    const res = await call('POST', '/api/v1/accounts/acme/credits', { amountMicros: 5_000_000, reference: 'invoice 42' });
    t.equal(res.statusCode, 201, res.body);
    t.match(res.json(), { balance: { accountId, account: 'acme', balanceMicros: 5_000_000, outstandingLeasesMicros: 0, availableMicros: 5_000_000, spentMicros: 0 } });
    const byId = await call('GET', `/api/v1/accounts/${accountId}/balance`);
    t.equal(byId.statusCode, 200);
    t.match(byId.json(), { balance: { balanceMicros: 5_000_000 }, leases: [] });
  });

  t.test('credits refuse floats, strings, zero and unknown accounts', async (t) => {
    for (const amountMicros of [1.5, '100', 0, -5]) {
      const res = await call('POST', '/api/v1/accounts/acme/credits', { amountMicros });
      t.equal(res.statusCode, 400, `amountMicros ${JSON.stringify(amountMicros)}`);
      t.match(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST' } });
    }
    // 1e300 fails the rule twice (not an integer, above the maximum); the reason is given once.
    const huge = await call('POST', '/api/v1/accounts/acme/credits', { amountMicros: 1e300 });
    t.equal(huge.statusCode, 400);
    t.equal(huge.json<{ error: { message: string } }>().error.message, `amountMicros: must be an integer from 1 to ${Number.MAX_SAFE_INTEGER}`);
    const missing = await call('POST', '/api/v1/accounts/nobody/credits', { amountMicros: 1 });
    t.equal(missing.statusCode, 404);
    t.match(missing.json(), { error: { code: 'ZN_ERR_CP_ACCOUNT_NOT_FOUND' } });
  });

  t.test('the lease handler grants on live, tops up on reports, takes returns, and the API shows it', async (t) => {
    const accountId = await insertAccount(pool, 'globex');
    await call('POST', '/api/v1/accounts/globex/credits', { amountMicros: 1_000 });
    const nodeId = await insertNode(pool, 'edge-billing');
    const handler = createLeaseStreamHandler({
      pool,
      logger: pino({ level: 'silent' }),
      policy: { capMicros: 400n, sharePpm: 500_000n, ttlMs: 3_600_000, refreshMs: 60_000 },
    });
    const node = { nodeId, nodeName: 'edge-billing', sessionId: 'session-1' };
    const sent: ControlMessage[] = [];
    const send = (m: ControlMessage): boolean => {
      sent.push(m);
      return true;
    };
    t.teardown(() => handler.onEnded?.(node));
    await handler.onLive!(node, send);
    const grant = sent.find((m) => m.leaseGrant?.accountId === accountId)?.leaseGrant;
    t.ok(grant, 'a lease of the account was granted');
    t.equal(grant!.amountMicros, 400n, 'min(cap 400, 0.5 × 1000)');
    const leaseId = grant!.leaseId;

    // The node spent 300 (100 of it already ingested) and holds 50.
    await withTransaction(pool, (c) => settleIngestedRecords(c, nodeId, [{
      schemaVersion: 1, requestId: 'api-rec-1', nodeId, configVersion: 1, receivedAt: Date.now(), finishedAt: Date.now(), surface: 'model',
      api: 'chat.completions', keyId: 'k', accountId, model: 'm', upstream: 'u', upstreamModel: 'm', stream: false, status: 'ok',
      httpStatus: 200, errorCode: null, usage: { inputTokens: 1, outputTokens: 1, estimated: false },
      cost: { reservedMicros: 100, costMicros: 100, leaseId, priced: true },
      timings: { totalMs: 1, upstreamFirstByteMs: null, upstreamMs: null, stagesUs: {} }, attempts: [], guardrails: [], bodies: null,
    }]));
    await handler.handle(node, { leaseReport: { accountId, leaseId, spentMicros: 300n, reservedMicros: 50n, remainingMicros: 50n, reportedAt: BigInt(Date.now()) } }, send);
    // balance 900, outstanding 300 → free 600; target min(400, 0.5 × (600 + 300)) = 400; node has 50 → +350.
    t.same(sent.at(-1), { leaseGrant: { accountId, leaseId, amountMicros: 750n, expiresAt: sent.at(-1)!.leaseGrant!.expiresAt, knownSpentMicros: 300n } });

    const leases = await call('GET', '/api/v1/leases?node=edge-billing');
    t.equal(leases.statusCode, 200);
    const globex = leases.json<{ leases: Array<{ account: string }> }>().leases.find((l) => l.account === 'globex');
    t.match(globex, { leaseId, node: 'edge-billing', state: 'open', grantedMicros: 750, spentMicros: 100, reportedSpentMicros: 300 });
    const byId = await call('GET', `/api/v1/leases?node=${nodeId.toUpperCase()}`);
    t.same(byId.json(), leases.json(), 'the node by its id (either case) is the same list');
    t.match((await call('GET', '/api/v1/leases?node=00000000-0000-4000-8000-000000000000')).json(), { error: { code: 'ZN_ERR_CP_NODE_NOT_FOUND' } });

    await handler.handle(node, { leaseReturn: { accountId, leaseId, spentMicros: 300n, returnedMicros: 450n } }, send);
    const balance = (await call('GET', '/api/v1/accounts/globex/balance')).json<{ balance: Record<string, number> }>().balance;
    // 200 spent on the node is not ingested yet: still committed.
    t.match(balance, { balanceMicros: 900, outstandingLeasesMicros: 200, availableMicros: 700, spentMicros: 100 });

    await t.rejects(handler.handle(node, { leaseReport: { accountId, leaseId, spentMicros: -1n, reservedMicros: 0n, remainingMicros: 0n, reportedAt: 0n } }, send), NodeMessageInvalid);
  });

  t.test('the refresh grants a lease for an account that appears while the node is live', async (t) => {
    const nodeId = await insertNode(pool, 'edge-refresh');
    const handler = createLeaseStreamHandler({ pool, logger: pino({ level: 'silent' }), policy: { capMicros: 1_000n, sharePpm: 1_000_000n, ttlMs: 3_600_000, refreshMs: 100 } });
    const node = { nodeId, nodeName: 'edge-refresh', sessionId: 'session-2' };
    const sent: ControlMessage[] = [];
    t.teardown(() => handler.onEnded?.(node));
    await handler.onLive!(node, (m) => {
      sent.push(m);
      return true;
    });
    const accountId = await insertAccount(pool, 'initech');
    await call('POST', '/api/v1/accounts/initech/credits', { amountMicros: 10_000 });
    await waitFor(() => sent.some((m) => m.leaseGrant?.accountId === accountId), { timeoutMs: 10_000, what: 'a grant for the new account' });
    t.equal(sent.find((m) => m.leaseGrant?.accountId === accountId)!.leaseGrant!.amountMicros, 1_000n);
  });

  t.test('a lease expires when a node credential would (ZENOVA_CREDENTIAL_VALIDITY_SECONDS), not after a fixed 30 days', async (t) => {
    const accountId = await insertAccount(pool, 'umbrella');
    await call('POST', '/api/v1/accounts/umbrella/credits', { amountMicros: 10_000 });
    const nodeId = await insertNode(pool, 'edge-validity');
    const base = testSettings(db.url);
    const validityMs = 2 * 3_600_000;
    // The handlers a gateway session really uses, built from settings as main.ts builds them.
    const handlers = createNodeStreamHandlers({ pool, logger: pino({ level: 'silent' }), settings: { ...base, nodes: { ...base.nodes, credentialValidityMs: validityMs } } });
    const node = { nodeId, nodeName: 'edge-validity', sessionId: 'session-3' };
    const sent: ControlMessage[] = [];
    t.teardown(() => handlers.forEach((h) => h.onEnded?.(node)));
    const before = Date.now();
    for (const handler of handlers) {
      await handler.onLive?.(node, (m) => {
        sent.push(m);
        return true;
      });
    }
    const grant = sent.find((m) => m.leaseGrant?.accountId === accountId)?.leaseGrant;
    t.ok(grant, 'a lease was granted');
    const expiresAt = Number(grant!.expiresAt);
    t.ok(expiresAt >= before + validityMs && expiresAt <= Date.now() + validityMs, `expires ${expiresAt - before} ms after the grant`);
  });

  t.test('spend is grouped by account, key and node over a window', async (t) => {
    for (const by of ['account', 'key', 'node']) {
      const res = await call('GET', `/api/v1/spend?by=${by}`);
      t.equal(res.statusCode, 200, res.body);
      t.match(res.json(), { by, rows: [{ requests: 1, spentMicros: 100 }] });
    }
    const byAccount = (await call('GET', '/api/v1/spend?by=account')).json<{ rows: Array<{ name: string }> }>();
    t.equal(byAccount.rows[0]!.name, 'globex');
    const empty = await call('GET', '/api/v1/spend?by=node&from=2000-01-01T00:00:00Z&to=2000-01-02T00:00:00Z');
    t.same(empty.json<{ rows: unknown[] }>().rows, []);
    t.equal((await call('GET', '/api/v1/spend?by=nothing')).statusCode, 400);
    t.equal((await call('GET', '/api/v1/spend?from=yesterday')).statusCode, 400);
  });
});
