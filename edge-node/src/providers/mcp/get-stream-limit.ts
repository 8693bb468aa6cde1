/**
 * Open MCP GET event streams of a key (and of its account). A GET stream frees its concurrency slot
 * once its head is relayed (it is a push channel, not work in progress: rate-limit
 * releaseConcurrencySlot), so a key with `concurrentRequests: N` can run N sessions, each with the
 * stream the SDK opens by itself. Open streams are counted under a limit of their own instead: at
 * most `concurrentRequests` of them per key (and per account), counted in this process. Keys
 * without a concurrency limit are not refused here, but their streams are counted all the same: a
 * later config may set a limit, and the streams already open must count against it (GET streams
 * are few, and the count is a Map update).
 */
import type { PipelineContext } from '../../pipeline/context.js';
import { reject } from '../../pipeline/stage.js';
import type { Rejection } from '../../pipeline/stage.js';
import { noteRateLimitHit } from '../../rate-limit/rate-limit-hits.js';

/** Open GET streams by key id, and by account id. */
const openByKey = new Map<string, number>();
const openByAccount = new Map<string, number>();

function refuse(ctx: PipelineContext, scope: 'key' | 'account', limit: number): Rejection {
  ctx.responseHeaders['retry-after'] = '1';
  noteRateLimitHit(ctx, { scope, limit: 'concurrency' });
  return reject('ZN_ERR_CONCURRENCY_LIMITED', `Too many MCP event streams (GET) are open for this ${scope} (limit ${limit}).`);
}

function closed(open: Map<string, number>, id: string): void {
  const left = (open.get(id) ?? 1) - 1;
  if (left > 0) open.set(id, left);
  else open.delete(id);
}

/** Counts the GET stream `ctx` opens until the request ends, or refuses it (429, retryable) past the limit. */
export function admitGetStream(ctx: PipelineContext): Rejection | undefined {
  const key = ctx.key;
  if (key === undefined) return undefined;
  const keyLimit = key.keyLimits.concurrentRequests;
  if (keyLimit !== undefined && (openByKey.get(key.id) ?? 0) >= keyLimit) return refuse(ctx, 'key', keyLimit);
  const accountId = key.accountId;
  const accountLimit = accountId === null ? undefined : key.accountLimits.concurrentRequests;
  if (accountId !== null && accountLimit !== undefined && (openByAccount.get(accountId) ?? 0) >= accountLimit) return refuse(ctx, 'account', accountLimit);
  openByKey.set(key.id, (openByKey.get(key.id) ?? 0) + 1);
  if (accountId !== null) openByAccount.set(accountId, (openByAccount.get(accountId) ?? 0) + 1);
  ctx.cleanups.push(() => {
    closed(openByKey, key.id);
    if (accountId !== null) closed(openByAccount, accountId);
  });
  return undefined;
}
