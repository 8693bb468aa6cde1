// The node gateway's control session over real TLS and a real database: hello and heartbeats,
// every way a call is refused, malformed messages, a second connection, and shutdown.
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import type { Test } from 'tap';
import { revokeNodeCredentials, issueCredential } from '../../control-plane/src/nodes/credentials.js';
import { withTransaction } from '../../control-plane/src/nodes/with-transaction.js';
import { PROTOCOL_VERSION, isRefusalRetryable, refusalCodeOfStatusDetails, type RefusalCode } from '../../proto/src/index.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import {
  connectNode,
  enrolledNode,
  gatewayIdentity,
  gatewaySettings,
  helloFor,
  liveSession,
  migratedPool,
  refusalOf,
  startTestGateway,
  timingsOf,
  waitForRow,
  type EnrolledNode,
} from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url, { heartbeatIntervalMs: 750 });
const gateway = await startTestGateway(t, { pool, settings, identity, helloDeadlineMs: 400 });
const port = gateway.server.port;

async function expectRefused(
  tt: Test,
  metadata: { nodeId?: string; credential?: string },
  code: RefusalCode,
  status: grpc.status,
  send?: (conn: ReturnType<typeof connectNode>) => void,
): Promise<string> {
  const conn = connectNode(tt, port, identity.caPem, metadata);
  send?.(conn);
  const refusal = await refusalOf(conn, code);
  tt.equal(refusal.code, code, `refusal code ${code}`);
  tt.equal(refusal.retryable, isRefusalRetryable(code), 'retryable as the code table says');
  tt.equal(refusal.status.code, status, `gRPC status ${grpc.status[status]}`);
  tt.equal(refusalCodeOfStatusDetails(refusal.status.details), code, 'the status details start with the code');
  tt.equal(conn.received.length, 1, 'nothing but the refusal was sent');
  return refusal.message;
}

t.test('a node with a valid credential is welcomed with the protocol version and the heartbeat interval', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn, ack } = await liveSession(t, port, identity.caPem, node);
  t.equal(ack.helloAck?.accepted, true);
  t.equal(ack.helloAck?.serverProtocolVersion, PROTOCOL_VERSION);
  t.equal(ack.helloAck?.heartbeatIntervalMs, 750, 'the interval comes from settings.nodes.heartbeatIntervalMs');
  t.match(ack.helloAck?.sessionId, /^[0-9a-f-]{36}$/);
  t.ok(typeof ack.helloAck?.serverTime === 'bigint' && ack.helloAck.serverTime > 0n, 'server time is set');
  await waitFor(() => gateway.server.sessionCount() >= 1, { what: 'the session to be counted' });

  const row = await waitForRow<{ version: string; protocol_version: number; hostname: string; arch: string }>(
    pool, 'the hello facts', 'select version, protocol_version, hostname, arch from nodes where id = $1', [node.id],
    (r) => r.version === '0.1.0',
  );
  t.same(row, { version: '0.1.0', protocol_version: PROTOCOL_VERSION, hostname: 'edge-host-1', arch: 'arm64' }, 'hello facts are recorded');
  conn.end();
  const status = await conn.finalStatus('the end of the call');
  t.equal(status.code, grpc.status.OK, 'a node that closes its side ends the call cleanly');
});

t.test('heartbeats record the time, figures and the node\'s clock skew, and move onboarding to first-heartbeat but never back', async (t) => {
  const node = await enrolledNode(pool, settings);
  const before = await pool.query<{ onboarding_stage: string; last_heartbeat_at: Date | null }>(
    'select onboarding_stage, last_heartbeat_at from nodes where id = $1', [node.id],
  );
  t.same(before.rows[0], { onboarding_stage: 'registered', last_heartbeat_at: null }, 'an enrolled node starts at registered');

  const { conn } = await liveSession(t, port, identity.caPem, node);
  conn.send({ heartbeat: { sentAt: BigInt(Date.now()), requests5m: 120n, errors5m: 3n, spoolBytes: 4096n, backfillBacklog: 7n, appliedConfigVersion: 2n, ready: true } });
  const first = await waitForRow<{ onboarding_stage: string; last_heartbeat_at: Date; figures: Record<string, number> }>(
    pool, 'the first heartbeat', 'select onboarding_stage, last_heartbeat_at, figures from nodes where id = $1', [node.id],
    (r) => r.last_heartbeat_at !== null,
  );
  t.equal(first.onboarding_stage, 'first-heartbeat');
  const { clockSkewMs: firstSkew, ...firstFigures } = first.figures;
  t.same(firstFigures, { requests5m: 120, errors5m: 3, spoolBytes: 4096, backfillBacklog: 7, appliedConfigVersion: 2 });
  t.ok(Math.abs(firstSkew ?? Infinity) < 5_000, 'a node in step: its clock skew (sentAt against the control plane\'s clock) is near 0');

  // The config issue will move nodes on to config-synced; a heartbeat must not undo that.
  await pool.query(`update nodes set onboarding_stage = 'config-synced' where id = $1`, [node.id]);
  // This heartbeat comes from a node whose clock is 4 minutes behind.
  conn.send({ heartbeat: { sentAt: BigInt(Date.now() - 240_000), requests5m: 130n, errors5m: 4n, spoolBytes: 8192n, backfillBacklog: 0n, appliedConfigVersion: 3n, ready: true } });
  const second = await waitForRow<{ onboarding_stage: string; last_heartbeat_at: Date; figures: Record<string, number> }>(
    pool, 'the second heartbeat', 'select onboarding_stage, last_heartbeat_at, figures from nodes where id = $1', [node.id],
    (r) => r.figures.requests5m === 130,
  );
  t.equal(second.onboarding_stage, 'config-synced', 'the stage is never moved back');
  t.ok(second.last_heartbeat_at.getTime() >= first.last_heartbeat_at.getTime(), 'the heartbeat time moves on');
  const { clockSkewMs: secondSkew, ...secondFigures } = second.figures;
  t.same(secondFigures, { requests5m: 130, errors5m: 4, spoolBytes: 8192, backfillBacklog: 0, appliedConfigVersion: 3 });
  t.ok(Math.abs((secondSkew ?? Infinity) + 240_000) < 5_000, 'the skew of a node 4 minutes behind is recorded as about -240000 ms');
});

t.test('a missing, wrong, revoked or expired credential is refused with its own code and the gateway stays up', async (t) => {
  const node = await enrolledNode(pool, settings);

  await expectRefused(t, { nodeId: node.id }, 'CREDENTIAL_MISSING', grpc.status.UNAUTHENTICATED);
  await expectRefused(t, {}, 'CREDENTIAL_MISSING', grpc.status.UNAUTHENTICATED);

  const wrongSecret = `${node.credentialId}.${'A'.repeat(43)}`;
  await expectRefused(t, { nodeId: node.id, credential: wrongSecret }, 'CREDENTIAL_INVALID', grpc.status.UNAUTHENTICATED);
  await expectRefused(t, { nodeId: node.id, credential: 'not-a-credential' }, 'CREDENTIAL_INVALID', grpc.status.UNAUTHENTICATED);
  await expectRefused(t, { nodeId: node.id, credential: 'x'.repeat(4000) }, 'CREDENTIAL_INVALID', grpc.status.UNAUTHENTICATED);
  const other = await enrolledNode(pool, settings);
  await expectRefused(t, { nodeId: other.id, credential: node.credential }, 'CREDENTIAL_INVALID', grpc.status.UNAUTHENTICATED);

  const lapsed = await issueCredential(pool, node.id, { ...timingsOf(settings), validityMs: 60_000 }, new Date(Date.now() - 3_600_000));
  const expiredMessage = await expectRefused(t, { nodeId: node.id, credential: lapsed.credential }, 'CREDENTIAL_EXPIRED', grpc.status.UNAUTHENTICATED);
  t.match(expiredMessage, /re-enroll/i, 'an expired credential tells the operator to re-enroll');

  const revoked = await enrolledNode(pool, settings);
  await withTransaction(pool, (client) => revokeNodeCredentials(client, revoked.id));
  await expectRefused(t, { nodeId: revoked.id, credential: revoked.credential }, 'CREDENTIAL_REVOKED', grpc.status.UNAUTHENTICATED);

  const { ack } = await liveSession(t, port, identity.caPem, node);
  t.equal(ack.helloAck?.accepted, true, 'after all those refusals a valid node still connects');
  t.notMatch(gateway.log.text(), node.credential.split('.')[1]!, 'no credential secret reaches the log');
  t.notMatch(gateway.log.text(), lapsed.credential.split('.')[1]!, 'no credential secret reaches the log');
});

t.test('a node on another protocol version is refused with a message saying which side to upgrade', async (t) => {
  const node = await enrolledNode(pool, settings);
  const auth = { nodeId: node.id, credential: node.credential };
  const newer = await expectRefused(t, auth, 'PROTOCOL_INCOMPATIBLE', grpc.status.FAILED_PRECONDITION, (conn) => {
    conn.send(helloFor(node, { protocolVersion: PROTOCOL_VERSION + 1, version: '9.0.0' }));
  });
  t.match(newer, `v${PROTOCOL_VERSION + 1}`);
  t.match(newer, /upgrade the control plane/);
  const unset = await expectRefused(t, auth, 'PROTOCOL_INCOMPATIBLE', grpc.status.FAILED_PRECONDITION, (conn) => {
    conn.send(helloFor(node, { protocolVersion: 0 }));
  });
  t.match(unset, /upgrade the node/);
  // Past the nodes table's integer column: still "incompatible", not a database failure to retry at once.
  for (const protocolVersion of [2 ** 31, 2 ** 32 - 1]) {
    const huge = await expectRefused(t, auth, 'PROTOCOL_INCOMPATIBLE', grpc.status.FAILED_PRECONDITION, (conn) => {
      conn.send(helloFor(node, { protocolVersion }));
    });
    t.match(huge, /upgrade the control plane/, `v${protocolVersion} is told which side to upgrade`);
  }
  const row = await pool.query<{ version: string }>('select version from nodes where id = $1', [node.id]);
  t.equal(row.rows[0]?.version, '0.1.0', 'what the refused node runs is still recorded for the console');
});

t.test('a node that does not start with Hello is refused with HELLO_REQUIRED', async (t) => {
  const node = await enrolledNode(pool, settings);
  const auth = { nodeId: node.id, credential: node.credential };
  const silent = await expectRefused(t, auth, 'HELLO_REQUIRED', grpc.status.FAILED_PRECONDITION);
  t.match(silent, /no Hello within 400 ms/);
  const early = await expectRefused(t, auth, 'HELLO_REQUIRED', grpc.status.FAILED_PRECONDITION, (conn) => {
    conn.send({ heartbeat: { sentAt: 1n, requests5m: 0n, errors5m: 0n, spoolBytes: 0n, backfillBacklog: 0n, appliedConfigVersion: 0n, ready: false } });
  });
  t.match(early, /first message must be Hello, got heartbeat/);
});

t.test('a malformed message ends the session with MESSAGE_INVALID naming the field', async (t) => {
  const node = await enrolledNode(pool, settings);
  const auth = { nodeId: node.id, credential: node.credential };
  const longHost = await expectRefused(t, auth, 'MESSAGE_INVALID', grpc.status.INVALID_ARGUMENT, (conn) => {
    conn.send(helloFor(node, { hostname: 'h'.repeat(10_000) }));
  });
  t.match(longHost, /hello\.hostname/);
  const twoPayloads = await expectRefused(t, auth, 'MESSAGE_INVALID', grpc.status.INVALID_ARGUMENT, (conn) => {
    conn.send({ ...helloFor(node), credentialRotationAck: { credentialId: node.credentialId } });
  });
  t.match(twoPayloads, /exactly one payload/);
  const otherNode = await expectRefused(t, auth, 'MESSAGE_INVALID', grpc.status.INVALID_ARGUMENT, (conn) => {
    conn.send(helloFor({ id: '00000000-0000-4000-8000-000000000000', name: node.name }));
  });
  t.match(otherNode, /does not match the node id/);
  const shortHash = await expectRefused(t, auth, 'MESSAGE_INVALID', grpc.status.INVALID_ARGUMENT, (conn) => {
    conn.send(helloFor(node, { appliedConfigVersion: 3n, appliedConfigContentSha256: Buffer.alloc(31) }));
  });
  t.match(shortHash, /hello\.appliedConfigContentSha256: must be a SHA-256/);

  const { conn } = await liveSession(t, port, identity.caPem, node);
  conn.send({ heartbeat: { sentAt: 1n, requests5m: -5n, errors5m: 0n, spoolBytes: 0n, backfillBacklog: 0n, appliedConfigVersion: 0n, ready: true } });
  const refusal = await refusalOf(conn, 'negative counter');
  t.equal(refusal.code, 'MESSAGE_INVALID');
  t.match(refusal.message, /heartbeat\.requests5m: must not be negative/);
  const row = await pool.query<{ last_heartbeat_at: Date | null }>('select last_heartbeat_at from nodes where id = $1', [node.id]);
  t.equal(row.rows[0]?.last_heartbeat_at, null, 'the malformed heartbeat was not recorded');
});

t.test('messages the gateway does not act on are dropped and the session stays up', async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  conn.send({}); // a payload added by a newer, compatible node arrives as an empty envelope here
  conn.send({ leaseReport: { accountId: 'acct-1', leaseId: 'lease-1', spentMicros: 5n, reservedMicros: 0n, remainingMicros: 95n, reportedAt: 1n } });
  conn.send({ heartbeat: { sentAt: 1n, requests5m: 9n, errors5m: 0n, spoolBytes: 0n, backfillBacklog: 0n, appliedConfigVersion: 0n, ready: true } });
  await waitForRow(pool, 'the heartbeat after them', 'select figures from nodes where id = $1', [node.id],
    (r: { figures: { requests5m?: number } }) => r.figures.requests5m === 9);
  t.equal(conn.received.length, 1, 'no refusal: only the HelloAck was sent');
});

t.test('a second connection of the same node replaces the first', async (t) => {
  const node = await enrolledNode(pool, settings);
  const first = await liveSession(t, port, identity.caPem, node);
  const second = await liveSession(t, port, identity.caPem, node);
  const refusal = await refusalOf(first.conn, 'replaced session');
  t.equal(refusal.code, 'SESSION_REPLACED');
  t.equal(refusal.status.code, grpc.status.ABORTED);
  t.match(refusal.message, second.ack.helloAck!.sessionId, 'the refusal names the session that took over');
  second.conn.send({ heartbeat: { sentAt: 1n, requests5m: 1n, errors5m: 0n, spoolBytes: 0n, backfillBacklog: 0n, appliedConfigVersion: 0n, ready: true } });
  await waitForRow(pool, 'the new session to keep working', 'select last_heartbeat_at from nodes where id = $1', [node.id],
    (r: { last_heartbeat_at: Date | null }) => r.last_heartbeat_at !== null);
  t.equal(second.conn.received.length, 1, 'the newer session is untouched');
});

t.test('closing the gateway ends live sessions with SERVER_SHUTTING_DOWN, which the node may retry', async (t) => {
  const own = await startTestGateway(t, { pool, settings, identity });
  const node: EnrolledNode = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, own.server.port, identity.caPem, node);
  t.equal(own.server.sessionCount(), 1);
  await own.server.close();
  const refusal = await refusalOf(conn, 'shutdown');
  t.equal(refusal.code, 'SERVER_SHUTTING_DOWN');
  t.equal(refusal.retryable, true, 'the node may reconnect');
  t.equal(refusal.status.code, grpc.status.UNAVAILABLE);
  t.equal(own.server.sessionCount(), 0);
  await own.server.close(); // a second close is harmless
});
