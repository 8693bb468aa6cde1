/**
 * Open MCP GET event streams of a key (and of its account). A GET stream frees its concurrency slot
 * once its head is relayed (it is a push channel, not work in progress: rate-limit
 * releaseConcurrencySlot), so a key with `concurrentRequests: N` can run N sessions, each with the
 * stream the SDK opens by itself. Open streams are counted under a limit of their own instead: at
 * most `concurrentRequests` of them per key (and per account), counted in this process. Keys
 * without a concurrency limit have none here either.
 */
import type { PipelineContext } from '../../pipeline/context.js';
import { reject } from '../../pipeline/stage.js';
import type { Rejection } from '../../pipeline/stage.js';
import { noteRateLimitHit } from '../../rate-limit/rate-limit-hits.js';

const open = new Map<string, number>();

/** Counts the GET stream `ctx` opens until the request ends, or refuses it (429, retryable) past the limit. */
export function admitGetStream(ctx: PipelineContext): Rejection | undefined {
  const key = ctx.key;
  if (key === undefined) return undefined;
  const subjects: Array<{ subject: string; scope: 'key' | 'account'; limit: number }> = [];
  if (key.keyLimits.concurrentRequests !== undefined) subjects.push({ subject: `key:${key.id}`, scope: 'key', limit: key.keyLimits.concurrentRequests });
  if (key.accountId !== null && key.accountLimits.concurrentRequests !== undefined) {
    subjects.push({ subject: `account:${key.accountId}`, scope: 'account', limit: key.accountLimits.concurrentRequests });
  }
  for (const { subject, scope, limit } of subjects) {
    if ((open.get(subject) ?? 0) >= limit) {
      ctx.responseHeaders['retry-after'] = '1';
      noteRateLimitHit(ctx, { scope, limit: 'concurrency' });
      return reject('ZN_ERR_CONCURRENCY_LIMITED', `Too many MCP event streams (GET) are open for this ${scope} (limit ${limit}).`);
    }
  }
  for (const { subject } of subjects) open.set(subject, (open.get(subject) ?? 0) + 1);
  if (subjects.length > 0) {
    ctx.cleanups.push(() => {
      for (const { subject } of subjects) {
        const left = (open.get(subject) ?? 1) - 1;
        if (left > 0) open.set(subject, left);
        else open.delete(subject);
      }
    });
  }
  return undefined;
}
