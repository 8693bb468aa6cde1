// A caller that leaves while its answer waits on a full disk (the record's commit holds the
// answer's end back: docs/spool.md, "Disk full") never gets that answer, so its record must not say
// `ok` and charge the answer in full: it says `aborted`, as for any caller that leaves before its
// answer (docs/billing.md), charged as such — a JSON answer its prompt (the upstream had it), a
// stream what it carried. Real parts: the state dir is a tmpfs filled to ENOSPC (root only; skipped
// where mount is not permitted) and the services are serve's own (spool.db, credit-leases.sqlite).
import { rmSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LEASE_DB_FILE, openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { openNodeServices } from '../../../edge-node/src/cli/node-services.js';
import type { NodeServices } from '../../../edge-node/src/cli/node-services.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import type { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { PROMPT, gatedUpstream } from '../disk-full-fixtures.js';
import { fillDisk, mountSmallDisk, tmpfsSkip } from '../../fixtures/small-disk.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { startPipelineNode } from './pipeline-harness.js';
import type { PipelineNode } from './pipeline-harness.js';

const skip = tmpfsSkip();

interface DiskNode {
  dir: string;
  node: PipelineNode;
  services: NodeServices;
  spool: SpoolStore;
  upstream: Awaited<ReturnType<typeof gatedUpstream>>;
}

/** serve's services on a 24 MiB tmpfs state dir whose account holds a 10-unit lease; `echo` priced 1 µ per token. */
async function nodeOnSmallDisk(t: Test): Promise<DiskNode> {
  const closeFirst: Array<() => unknown> = [];
  const dir = mountSmallDisk(t, '24m', closeFirst);
  const granted = openLeaseStore(dir, { nodeId: 'node-1' });
  new LeaseBook(granted).grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 10_000_000, expiresAt: Date.now() + 600_000 });
  granted.close();
  const services = await openNodeServices({
    stateDir: dir,
    nodeId: 'node-1',
    holder: ConfigHolder.notReady('services only'),
    logger: createLogger({ level: 'silent' }),
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
  return { dir, node, services, spool: services.pipeline.spool as SpoolStore, upstream };
}

/** A caller whose connection can be dropped: resolves with what it got (status and body, or the error). */
function caller(n: DiskNode, stream: boolean): { leave: () => void; result: Promise<{ status: number; body: string } | { error: string }> } {
  const gone = new AbortController();
  const result = (async () => {
    try {
      const res = await fetch(`${n.node.origin}/v1/chat/completions`, {
        method: 'POST',
        signal: gone.signal,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${n.node.secret}` },
        body: JSON.stringify({ model: 'echo', stream, max_tokens: 16, messages: [{ role: 'user', content: PROMPT }] }),
      });
      return { status: res.status, body: await res.text() };
    } catch (err) {
      return { error: (err as Error).message };
    }
  })();
  return { leave: () => gone.abort(), result };
}

function recordsIn(dir: string): RequestRecord[] {
  const db = new Database(path.join(dir, 'spool.db'), { readonly: true });
  try {
    return (db.prepare('select record_json from records order by sequence').pluck().all() as string[]).map((json) => JSON.parse(json) as RequestRecord);
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

/**
 * One caller's answer held on a full disk, the caller leaving while it waits (the node has seen it
 * go: its "request finished" line is written when the connection closes), then space returning.
 */
async function callerLeavesWhileRecordWaits(n: DiskNode, stream: boolean): Promise<{ got: { status: number; body: string } | { error: string }; records: RequestRecord[] }> {
  const call = caller(n, stream);
  await waitFor(() => n.upstream.received() === 1, { what: 'the upstream to have the request' });
  const filler = fillDisk(n.dir);
  n.upstream.release();
  await waitFor(() => n.spool.pending().writeFailing && n.spool.pending().finals === 1, { what: 'the record to wait on a commit the full disk refuses' });
  call.leave();
  await waitFor(() => n.node.logText().includes('"msg":"request finished"'), { what: 'the node to see its caller leave' });
  rmSync(filler);
  await waitFor(() => n.spool.pending().finals === 0 && leaseIn(n.dir).reserved === 0, { what: 'the record to commit once space returned and the request to end its reservation' });
  const got = await call.result;
  await n.node.app.close();
  await n.services.close();
  return { got, records: recordsIn(n.dir) };
}

t.test('a caller that leaves while its JSON answer waits on a full disk is recorded aborted 499 and charged its prompt, not the answer', { skip }, async (t) => {
  const n = await nodeOnSmallDisk(t);
  const { got, records } = await callerLeavesWhileRecordWaits(n, false);
  t.ok('error' in got, 'the caller never got the answer');
  t.equal(records.length, 1, 'the request has its record');
  t.match(records[0], { status: 'aborted', httpStatus: 499, errorCode: null, upstream: 'demo', usage: { inputTokens: 40, outputTokens: 0 } }, 'recorded as a caller that left, not ok');
  t.equal(records[0]!.cost.costMicros, 40, 'charged the prompt the upstream had, not the answer that never reached the caller');
  t.match(records[0]!.bodies?.request, /x x x/, 'the bodies queued with it are kept');
  t.same(leaseIn(n.dir), { spent: 40, reserved: 0 }, 'the lease is charged what the record says');
});

t.test('a caller that leaves while its stream\'s end waits on a full disk is recorded aborted and charged what the stream carried', { skip }, async (t) => {
  const n = await nodeOnSmallDisk(t);
  const { got, records } = await callerLeavesWhileRecordWaits(n, true);
  t.ok('error' in got, 'the caller never got the stream\'s end');
  t.equal(records.length, 1);
  t.match(records[0], { status: 'aborted', httpStatus: 200, errorCode: null, upstream: 'demo', usage: { inputTokens: 40, outputTokens: 2 } }, 'recorded as a caller that left, not ok');
  t.equal(records[0]!.cost.costMicros, 42, 'its text went out: charged what it carried');
  t.same(leaseIn(n.dir), { spent: 42, reserved: 0 });
});
