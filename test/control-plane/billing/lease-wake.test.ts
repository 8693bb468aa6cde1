// Leases follow a top-up or a new account at once: the gateway's lease refresh runs hourly here,
// so every grant after the first has to come from a wake (a NOTIFY heard from PostgreSQL).
import t from 'tap';
import type { ControlMessage } from '../../../proto/src/index.js';
import { migrate } from '../../../control-plane/src/db/migrate.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { configApp } from '../config-harness.js';
import { enrolledNode, gatewayIdentity, gatewaySettings, liveSession, startTestGateway } from '../gateway-harness.js';

const HOUR_MS = 3_600_000;

const db = await testDatabase(t);
const { pool, call } = await configApp(t, db.url);
await migrate(pool);
const identity = await gatewayIdentity();
const base = gatewaySettings(db.url);
// ZENOVA_LEASE_REFRESH_MS an hour: only a wake can grant within the test.
const settings = { ...base, leases: { ...base.leases, refreshMs: HOUR_MS } };
const gateway = await startTestGateway(t, { pool, settings, identity });

async function created(method: 'POST', url: string, payload: unknown): Promise<Record<string, unknown>> {
  const res = await call(method, url, payload);
  if (res.statusCode !== 201) throw new Error(`${url}: ${res.statusCode} ${res.body}`);
  return res.json();
}

async function accountWithKey(name: string): Promise<string> {
  const { account } = (await created('POST', '/api/v1/accounts', { name })) as { account: { id: string } };
  await created('POST', '/api/v1/api-keys', { account: name, name: `${name}-key` });
  return account.id;
}

function grantsOf(received: ControlMessage[], accountId: string): bigint[] {
  return received.flatMap((m) => (m.leaseGrant?.accountId === accountId ? [m.leaseGrant.amountMicros] : []));
}

t.test('a top-up reaches a live node as a lease at once, not at the next hourly refresh', async (t) => {
  const accountId = await accountWithKey('wake-topup');
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  // The first grant (on live) happened with a zero balance: nothing to lease yet.
  await waitFor(() => conn.received.length >= 1, { what: 'HelloAck', timeoutMs: 10_000 });
  t.same(grantsOf(conn.received, accountId).filter((m) => m > 0n), [], 'no credit, no lease');

  const res = await call('POST', '/api/v1/accounts/wake-topup/credits', { amountMicros: 8_000_000 });
  t.equal(res.statusCode, 201, res.body);
  const grants = await waitFor(() => {
    const positive = grantsOf(conn.received, accountId).filter((m) => m > 0n);
    return positive.length > 0 ? positive : undefined;
  }, { what: 'a lease grant after the top-up', timeoutMs: 10_000 });
  // ZENOVA_LEASE_SHARE defaults to 0.25 of the free balance.
  t.equal(grants.at(-1), 2_000_000n);
});

t.test('an account created while a node is live is leased at once', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, gateway.server.port, identity.caPem, node);
  // Credit first (no key yet: the node serves nobody of this account), then the key: the config
  // change is what makes the account one to lease.
  const { account } = (await created('POST', '/api/v1/accounts', { name: 'wake-newco' })) as { account: { id: string } };
  t.equal((await call('POST', '/api/v1/accounts/wake-newco/credits', { amountMicros: 400_000 })).statusCode, 201);
  await created('POST', '/api/v1/api-keys', { account: 'wake-newco', name: 'newco-key' });
  const grants = await waitFor(() => {
    const positive = grantsOf(conn.received, account.id).filter((m) => m > 0n);
    return positive.length > 0 ? positive : undefined;
  }, { what: 'a lease grant for the new account', timeoutMs: 10_000 });
  t.equal(grants.at(-1), 100_000n);
});
