// A node stopped while its disk is full: answers wait on their records' commits (docs/spool.md,
// "Disk full"), the drain deadline passes and the node closes the connections. Those callers got a
// reset, not their answers, so their records must not say `ok` and charge the answer in full; and
// the spool's last commit, made at its close once space returned, must find the lease store still
// open to charge. Real parts: the state dir is a tmpfs filled to ENOSPC (root only; skipped where
// mount is not permitted), the services are serve's own (openNodeServices: spool.db,
// credit-leases.sqlite), and the stop is serve's sequence: drain, end the requests still running
// (ZN_ERR_NODE_STOPPING), close the connections left, close the services.
import { rmSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import type { RequestRecord } from '../../proto/src/index.js';
import { DEFAULT_CREDIT_POLICY } from '../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../edge-node/src/billing/lease-book.js';
import { LEASE_DB_FILE, openLeaseStore } from '../../edge-node/src/billing/lease-store.js';
import { openNodeServices } from '../../edge-node/src/cli/node-services.js';
import { endRunningRequests } from '../../edge-node/src/cli/serve.js';
import type { NodeServices } from '../../edge-node/src/cli/node-services.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { createLogger } from '../../edge-node/src/logger.js';
import type { SpoolStore } from '../../edge-node/src/spool/spool-store.js';
import { PROMPT, gatedUpstream } from './disk-full-fixtures.js';
import { fillDisk, mountSmallDisk, tmpfsSkip } from '../fixtures/small-disk.js';
import { waitFor } from '../fixtures/wait-for.js';
import { ACCOUNT_ID } from './config-fixtures.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';
import type { PipelineNode } from './pipeline/pipeline-harness.js';

const skip = tmpfsSkip();

interface StoppingNode {
  dir: string;
  node: PipelineNode;
  services: NodeServices;
  spool: SpoolStore;
  upstream: Awaited<ReturnType<typeof gatedUpstream>>;
  /** Every line the node and its services logged. */
  logText(): string;
}

/** serve's services on a 24 MiB tmpfs state dir whose account holds a 10-unit lease; `echo` priced 1 µ per token. */
async function nodeOnSmallDisk(t: Test): Promise<StoppingNode> {
  const closeFirst: Array<() => unknown> = [];
  const dir = mountSmallDisk(t, '24m', closeFirst);
  const granted = openLeaseStore(dir, { nodeId: 'node-1' });
  new LeaseBook(granted).grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 10_000_000, expiresAt: Date.now() + 600_000 });
  granted.close();
  const serviceLines: string[] = [];
  const services = await openNodeServices({
    stateDir: dir,
    nodeId: 'node-1',
    holder: ConfigHolder.notReady('services only'),
    logger: createLogger({ level: 'debug', destination: { write: (line: string) => void serviceLines.push(line) } }),
    env: {},
    creditPolicy: DEFAULT_CREDIT_POLICY,
    spoolSynchronous: 'normal',
    adminListen: undefined,
  });
  closeFirst.push(() => services.close());
  const upstream = await gatedUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: () => ({ prices: [{ model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 1, requestMicros: 0 }] }),
    services: services.pipeline,
  });
  closeFirst.unshift(() => node.app.close());
  return { dir, node, services, spool: services.pipeline.spool as SpoolStore, upstream, logText: () => `${serviceLines.join('\n')}\n${node.logText()}` };
}

/** What a caller got: the status and whole body, or the error its connection ended with. */
type CallerResult = { status: number; body: string } | { error: string };

async function post(n: StoppingNode, stream: boolean): Promise<CallerResult> {
  try {
    const res = await fetch(`${n.node.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${n.node.secret}` },
      body: JSON.stringify({ model: 'echo', stream, max_tokens: 16, messages: [{ role: 'user', content: PROMPT }] }),
    });
    return { status: res.status, body: await res.text() };
  } catch (err) {
    return { error: (err as Error).message };
  }
}

/** Sends `count` requests, lets the upstream have them (their open rows committed), fills the disk, then releases the answers. */
async function answersWaitingOnFullDisk(n: StoppingNode, count: number, stream: boolean): Promise<{ callers: Promise<CallerResult[]>; filler: string }> {
  const callers = Promise.all(Array.from({ length: count }, () => post(n, stream)));
  await waitFor(() => n.upstream.received() === count, { what: 'the upstream to have every request' });
  const filler = fillDisk(n.dir);
  n.upstream.release();
  await waitFor(() => n.spool.pending().writeFailing && n.spool.pending().finals === count, { what: 'every record to wait on a commit the full disk refuses' });
  return { callers, filler };
}

/** serve's stop past its drain deadline: the requests still running ended, `graceMs` later the connections left closed. */
async function stopAtDeadline(n: StoppingNode, graceMs: number, meanwhile?: () => void): Promise<void> {
  const closing = n.node.app.close();
  const ended = endRunningRequests(n.node.app, n.services.pipeline.spool, graceMs);
  meanwhile?.();
  await ended;
  await closing;
}

function recordsIn(dir: string): { records: RequestRecord[]; open: number } {
  const db = new Database(path.join(dir, 'spool.db'), { readonly: true });
  try {
    const rows = db.prepare('select record_json from records order by sequence').pluck().all() as string[];
    const open = Number(db.prepare('select count(*) from open_requests').pluck().get());
    return { records: rows.map((json) => JSON.parse(json) as RequestRecord), open };
  } finally {
    db.close();
  }
}

function leaseIn(dir: string): { spent: number; reserved: number } {
  const db = new Database(path.join(dir, LEASE_DB_FILE), { readonly: true });
  try {
    return db.prepare("select spent, reserved from leases where lease_id = 'lease-1'").get() as { spent: number; reserved: number };
  } finally {
    db.close();
  }
}

const served = (results: CallerResult[]): number => results.filter((r) => 'status' in r && r.status === 200).length;
const costOf = (records: RequestRecord[]): number => records.reduce((sum, r) => sum + r.cost.costMicros, 0);

t.test('answers the stop cut off while their records waited on a full disk are recorded failed ZN_ERR_NODE_STOPPING and charged nothing, though the spool\'s last commit lands', { skip }, async (t) => {
  const n = await nodeOnSmallDisk(t);
  const { callers, filler } = await answersWaitingOnFullDisk(n, 5, false);
  await stopAtDeadline(n, 200);
  const results = await callers;
  t.equal(served(results), 0, 'no caller got an answer: their connections were closed by the stop');
  // Space returns as the stop goes on (in the field: the other state files closing), so the spool's
  // close commits the records its requests waited on.
  rmSync(filler);
  await n.services.close();

  const { records, open } = recordsIn(n.dir);
  t.equal(records.length, 5, 'each request has its record');
  t.equal(open, 0, 'and no open row is left for the next start');
  for (const record of records) {
    t.match(record, { status: 'failed', httpStatus: 503, errorCode: 'ZN_ERR_NODE_STOPPING', upstream: null }, 'recorded as ended by the stop, not ok');
    t.equal(record.cost.costMicros, 0, 'charged nothing: nothing reached its caller');
    t.ok(record.cost.reservedMicros > 0, 'with the reservation it held');
    t.match(record.bodies?.request, /x x x/, 'the bodies queued with it are kept');
  }
  t.same(leaseIn(n.dir), { spent: 0, reserved: 0 }, 'the lease charged nothing and released every reservation: charged as served');
  t.notMatch(n.logText(), /database connection is not open/i, 'no charge went to a closed lease store');
});

t.test('records of cut-off answers that commit once space returns before the services close are recorded failed ZN_ERR_NODE_STOPPING and charged nothing', { skip }, async (t) => {
  const n = await nodeOnSmallDisk(t);
  const { callers, filler } = await answersWaitingOnFullDisk(n, 2, false);
  await stopAtDeadline(n, 200);
  t.equal(served(await callers), 0, 'no caller got an answer');
  // The spool's own retry commits them while the node is still stopping (the lease return, the link).
  rmSync(filler);
  await waitFor(() => !n.spool.pending().writeFailing && n.spool.pending().finals === 0, { what: 'the queued records to commit once space returned' });
  await waitFor(() => leaseIn(n.dir).reserved === 0, { what: 'the requests to end their reservations' });
  t.same(leaseIn(n.dir), { spent: 0, reserved: 0 }, 'the lease charged nothing');
  await n.services.close();
  const { records } = recordsIn(n.dir);
  t.equal(records.length, 2);
  for (const record of records) t.match(record, { status: 'failed', httpStatus: 503, errorCode: 'ZN_ERR_NODE_STOPPING', upstream: null, cost: { costMicros: 0 } });
  t.notMatch(n.logText(), /database connection is not open/i);
});

t.test('a stream whose end waited on a full disk when the stop closed its connection is recorded failed ZN_ERR_NODE_STOPPING, charged what it delivered', { skip }, async (t) => {
  const n = await nodeOnSmallDisk(t);
  const { callers, filler } = await answersWaitingOnFullDisk(n, 1, true);
  await stopAtDeadline(n, 200);
  const [result] = await callers;
  t.ok(result !== undefined && 'error' in result, 'the caller never got the stream\'s end');
  rmSync(filler);
  await n.services.close();

  const { records } = recordsIn(n.dir);
  t.equal(records.length, 1);
  t.match(records[0], { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_NODE_STOPPING', upstream: 'demo', usage: { inputTokens: 40, outputTokens: 2 } });
  t.equal(records[0]!.cost.costMicros, 42, 'its text went out: charged what it delivered');
  t.same(leaseIn(n.dir), { spent: 42, reserved: 0 }, 'and the lease is charged what the record says');
  t.notMatch(n.logText(), /database connection is not open/i);
});

t.test('answers whose records commit once space returns within the stop\'s grace go out, recorded ok and charged in full', { skip }, async (t) => {
  const n = await nodeOnSmallDisk(t);
  const { callers, filler } = await answersWaitingOnFullDisk(n, 3, false);
  // The requests are ended while they wait (the deadline); space returns before the connections close.
  await stopAtDeadline(n, 10_000, () => rmSync(filler));
  const results = await callers;
  t.equal(served(results), 3, 'every caller got its answer');
  await n.services.close();

  const { records } = recordsIn(n.dir);
  t.equal(records.length, 3);
  for (const record of records) t.match(record, { status: 'ok', httpStatus: 200, errorCode: null, upstream: 'demo', cost: { costMicros: 42 } });
  t.same(leaseIn(n.dir), { spent: costOf(records), reserved: 0 }, 'charged as served: 3 answers, 3 charges');
  t.notMatch(n.logText(), /database connection is not open/i);
});
