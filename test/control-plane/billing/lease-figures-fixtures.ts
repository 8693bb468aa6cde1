// What the tests of lease figures beyond a grant share: the default lease policy (a quarter of the
// free balance), a finished request record charged to a lease, the next lease grant or message of a
// kind on a node's control stream, and a lease's row figures.
import type pg from 'pg';
import type { ControlMessage, LeaseGrant, RequestRecord } from '../../../proto/src/index.js';
import type { LeasePolicy } from '../../../control-plane/src/billing/lease-policy.js';
import type { NodeConnection } from '../gateway-harness.js';

const HOUR = 3_600_000;
/** The product's default share (ZENOVA_LEASE_SHARE 0.25), which the gateway's settings use too. */
export const QUARTER_SHARE_POLICY: LeasePolicy = { capMicros: 100_000_000n, sharePpm: 250_000n, ttlMs: HOUR, refreshMs: HOUR };

/** A finished, priced chat request of `accountId` on `nodeId` that reserved `reserved` and cost `cost` of lease `leaseId`. */
export function leaseChargedRecord(
  requestId: string,
  accountId: string,
  nodeId: string,
  leaseId: string,
  reserved: number,
  cost: number,
  at: { receivedAt: number; finishedAt: number },
): RequestRecord {
  return {
    schemaVersion: 1, requestId, nodeId, configVersion: 1, receivedAt: at.receivedAt, finishedAt: at.finishedAt,
    surface: 'model', api: 'chat.completions', keyId: 'key-1', accountId, model: 'm', upstream: 'u', upstreamModel: 'm', stream: false,
    status: 'ok', httpStatus: 200, errorCode: null, usage: { inputTokens: 1, outputTokens: 1, estimated: false },
    cost: { reservedMicros: reserved, costMicros: cost, leaseId, priced: true },
    timings: { totalMs: 1, upstreamFirstByteMs: 1, upstreamMs: 1, stagesUs: {} }, attempts: [], guardrails: [], bodies: null,
  };
}

/** The next LeaseGrant of `accountId` on the connection (grants of other tests' accounts skipped). */
export async function nextGrantOf(conn: NodeConnection, accountId: string, what: string): Promise<LeaseGrant> {
  for (;;) {
    const message: ControlMessage = await conn.next(what);
    if (message.leaseGrant?.accountId === accountId) return message.leaseGrant;
  }
}

/** The next message of `kind` on the connection (lease grants of any account skipped). */
export async function nextOf(conn: NodeConnection, kind: keyof ControlMessage, what: string): Promise<ControlMessage> {
  for (;;) {
    const message = await conn.next(what);
    if (message[kind] !== undefined) return message;
  }
}

/** A lease's figures as stored: granted, returned, outstanding (granted − spent − returned), held, and its state. */
export async function leaseRow(pool: pg.Pool, leaseId: string): Promise<{ granted: bigint; returned: bigint; outstanding: bigint; held: bigint; state: string }> {
  const { rows } = await pool.query<{ g: string; r: string; o: string; h: string; state: string }>(
    `select granted_micros::text as g, returned_micros::text as r, (granted_micros - spent_micros - returned_micros)::text as o,
            held_micros::text as h, state
       from credit_leases where id = $1`,
    [leaseId],
  );
  const r = rows[0]!;
  return { granted: BigInt(r.g), returned: BigInt(r.r), outstanding: BigInt(r.o), held: BigInt(r.h), state: r.state };
}
