/**
 * The RateLimiter the pipeline's rate-limit stage calls: turns the caller key's and account's
 * limits into checks on a LimitStore, sets Retry-After / x-ratelimit-* headers (OpenAI's names),
 * and registers the cleanups that free the concurrency slot and true up the token charge with the
 * request's real usage. Requests that hold no slot are tracked in flight in memory, so a
 * concurrency limit a later config sets counts them too.
 */
import { randomUUID } from 'node:crypto';
import type { RateLimits } from '../../../proto/src/index.js';
import { feeCount, worstCaseOutputTokens } from '../billing/request-cost.js';
import type { Logger } from '../logger.js';
import type { CallerKey, PipelineContext } from '../pipeline/context.js';
import { chatChoiceCount } from '../providers/openai/chat-request.js';
import { reject } from '../pipeline/stage.js';
import type { Rejection } from '../pipeline/stage.js';
import type { AdmitOutcome, LimitStore, RateCheck, RateMetric, SlotAdoption, SlotCheck, WindowChange } from './limit-store.js';
import { noteRateLimitHit, noteRateLimitStoreFailure } from './rate-limit-hits.js';
import type { LimitScope } from './rate-limit-hits.js';
import { WINDOW_MS, chargeFor, minuteOf, msUntilEmpty, msUntilFits, windowUsage } from './sliding-window.js';
import type { RateLimiter } from './rate-limiter.js';

/** Output tokens assumed per choice when a chat/messages request names no max_tokens (trued up afterwards). */
export const DEFAULT_OUTPUT_TOKEN_ESTIMATE = 1024;
/** A concurrency refusal has no computable wait; this asks for a short one. */
const CONCURRENCY_RETRY_AFTER_S = 1;

/** A slot for a request already in flight, and where that request is tracked until then. */
interface Adoption extends SlotAdoption {
  ctx: PipelineContext;
  unslotted: Map<string, Set<PipelineContext>>;
  id: string;
}

const NO_ADOPTIONS: readonly Adoption[] = [];

interface ScopedLimits {
  scope: LimitScope;
  subject: string;
  limits: RateLimits;
}

/**
 * The tokens a request is charged on admission: its prompt estimate plus the output it may produce
 * (per choice, times chat `n`: the same worst case credit is reserved for).
 */
export function tokenEstimate(ctx: PipelineContext): number {
  return Math.max(0, Math.ceil(ctx.estimatedInputTokens)) + worstCaseOutputTokens(ctx, DEFAULT_OUTPUT_TOKEN_ESTIMATE);
}

/**
 * The token true-up when a request ends: its real usage replaces the estimate it was charged on
 * admission. Ended in the minute it was admitted: the difference goes to that minute. Ended in a
 * later minute (a long stream, whose usage is known only at its end): the estimate is given back
 * to the admission minute (as much of it as that window still holds) and the whole usage is added
 * to the minute it became known. So a long stream is counted in full, for the next 60–120 s, never
 * at the decayed weight of a past minute nor dropped with a window that is gone; it is not spread
 * over the minutes it ran, because the node does not know how its tokens were spread.
 */
/**
 * The time the store judged rate check `index` by: `nowMs`, or the start of a later minute another
 * replica had already written (read in the store's transaction after this one read its clock, or
 * after the wall clock stepped back). The counts are that minute's: waits and headers are worked
 * out there and the gap to it added, so a refusal's Retry-After is never too short.
 */
function judgedAt(outcome: AdmitOutcome, index: number, nowMs: number): number {
  const minute = outcome.chargedMinutes?.[index];
  return minute === undefined ? nowMs : Math.max(nowMs, minute * WINDOW_MS);
}

export function tokenTrueUp(checks: ReadonlyArray<RateCheck & { admittedMinute: number }>, used: number, endMinute: number): WindowChange[] {
  const changes: WindowChange[] = [];
  for (const { subject, charge, admittedMinute } of checks) {
    if (endMinute <= admittedMinute) {
      // More than estimated goes to the minute it became known, which is the admission minute
      // unless the wall clock stepped back across minutes since: then it is the minute the windows
      // were moved back to (the admission minute, ahead of the clock, would move them forward again).
      if (used !== charge) changes.push({ subject, metric: 'tokens', minute: used > charge ? endMinute : admittedMinute, delta: used - charge });
      continue;
    }
    if (charge > 0) changes.push({ subject, metric: 'tokens', minute: admittedMinute, delta: -charge });
    if (used > 0) changes.push({ subject, metric: 'tokens', minute: endMinute, delta: used });
  }
  return changes;
}

/**
 * What a request counts against requests/min: 1, or for an MCP POST its billable calls (feeCount:
 * one per `tools/call`, so a batch of 100 counts as 100, as it is charged), at least 1 (an
 * initialize, a notification, a GET or DELETE still count as the one request they are).
 */
export function requestUnits(ctx: PipelineContext): number {
  return ctx.api === 'mcp' ? Math.max(1, feeCount(ctx)) : 1;
}

/**
 * The first requests/min limit (key, then account) smaller than the request's units (requestUnits):
 * an MCP batch holding more tool calls than that limit can never fit, at any wait.
 */
function tooManyCallsFor(scoped: readonly ScopedLimits[], units: number): { scope: LimitScope; limit: number } | undefined {
  if (units <= 1) return undefined;
  for (const { scope, limits } of scoped) {
    const limit = limits.requestsPerMinute;
    if (limit !== undefined && units > limit) return { scope, limit };
  }
  return undefined;
}

/**
 * The first tokens/min limit (key, then account) a request with an explicit output cap
 * (max_tokens / max_completion_tokens) can never fit: its estimate alone is larger than the limit.
 * Without an explicit cap the default estimate is a guess, not the caller's word: never refused for it.
 */
function tooLargeFor(ctx: PipelineContext, scoped: readonly ScopedLimits[], tokens: number): { scope: LimitScope; limit: number } | undefined {
  if (ctx.maxOutputTokens === null || ctx.api === 'mcp') return undefined;
  for (const { scope, limits } of scoped) {
    const limit = limits.tokensPerMinute;
    if (limit !== undefined && tokens > limit) return { scope, limit };
  }
  return undefined;
}

/**
 * "Request too large", with the parts of the count (tokenEstimate) named: with `n` > 1 every choice
 * reserves max_tokens, and lowering `n` helps as much as lowering max_tokens.
 */
function requestTooLargeMessage(ctx: PipelineContext, tooLarge: { scope: LimitScope; limit: number }, tokens: number): string {
  const prompt = Math.max(0, Math.ceil(ctx.estimatedInputTokens));
  const choices = ctx.api === 'chat.completions' ? chatChoiceCount(ctx.forwardBody) : 1;
  const perChoice = Math.max(0, Math.trunc(ctx.maxOutputTokens ?? 0));
  const parts = choices > 1 ? `the prompt estimate ${prompt} plus max_tokens ${perChoice} × n ${choices}` : `the prompt estimate ${prompt} plus max_tokens ${perChoice}`;
  const advice = choices > 1 ? 'Lower max_tokens or n, or shorten the input' : 'Lower max_tokens or shorten the input';
  return `Request too large for the tokens per minute limit of this ${tooLarge.scope}: limit ${tooLarge.limit}, requested ${tokens} (${parts}). ${advice}; retrying does not help.`;
}

/** Go-style durations as OpenAI sends them: 250ms, 7s, 1m6s. */
export function formatReset(ms: number): string {
  if (ms <= 0) return '0s';
  if (ms < 1000) return `${Math.ceil(ms)}ms`;
  const seconds = Math.ceil(ms / 1000);
  const minutes = Math.floor(seconds / 60);
  return minutes > 0 ? `${minutes}m${seconds % 60}s` : `${seconds}s`;
}

/**
 * Frees the request's concurrency slot (key and account) now rather than when it ends: for a request
 * that stays open without working, such as an MCP GET event stream once its head is relayed (a push
 * channel, docs/node-api.md); it no longer counts as in flight either. Safe to call for any request,
 * and more than once.
 */
export function releaseConcurrencySlot(ctx: PipelineContext): void {
  ctx.releaseSlot?.();
}

function hasLimits(limits: RateLimits): boolean {
  return limits.requestsPerMinute !== undefined || limits.tokensPerMinute !== undefined || limits.concurrentRequests !== undefined;
}

function track(unslotted: Map<string, Set<PipelineContext>>, id: string, ctx: PipelineContext): void {
  const inFlight = unslotted.get(id);
  if (inFlight === undefined) unslotted.set(id, new Set([ctx]));
  else inFlight.add(ctx);
}

function untrack(unslotted: Map<string, Set<PipelineContext>>, id: string, ctx: PipelineContext): void {
  const inFlight = unslotted.get(id);
  if (inFlight !== undefined && inFlight.delete(ctx) && inFlight.size === 0) unslotted.delete(id);
}

export class NodeRateLimiter implements RateLimiter {
  private warnedAt = Number.NEGATIVE_INFINITY;
  // Slot ids are the limiter's own, never the request id: callers choose x-request-id, and two
  // requests sharing one must still hold two slots.
  private readonly slotPrefix = randomUUID();
  private slotSeq = 0;
  // This process's requests in flight that hold no concurrency slot for their key (by key id) or
  // account (by account id): admitted while it had no concurrency limit. A later config may set one,
  // and it must count them: the first request admitted under it adopts them (takes slots for them in
  // the same store step, before the checks; freed when they end). Kept here rather than as a slot in
  // the store for every request: the replicas' shared store would cost a write per request of keys
  // that have no limit. Another replica's such requests count once that replica admits one under the
  // limit (docs/node-api.md).
  private readonly unslottedByKey = new Map<string, Set<PipelineContext>>();
  private readonly unslottedByAccount = new Map<string, Set<PipelineContext>>();
  /** The slots adopted for a request in flight, freed when it ends. */
  private readonly adoptedSlots = new Map<PipelineContext, string[]>();

  constructor(
    private readonly store: LimitStore,
    private readonly logger: Logger,
  ) {}

  admit(ctx: PipelineContext): Rejection | undefined {
    const key = ctx.key;
    if (key === undefined) return undefined;
    const keyHas = hasLimits(key.keyLimits);
    const accountHas = key.accountId !== null && hasLimits(key.accountLimits);
    // The common case (no limits): no store call, only this process's count of requests in flight.
    if (!keyHas && !accountHas) {
      this.trackUntilEnd(ctx, key, false, true, true);
      return undefined;
    }

    const scoped: ScopedLimits[] = [];
    if (keyHas) scoped.push({ scope: 'key', subject: `key:${key.id}`, limits: key.keyLimits });
    if (accountHas) scoped.push({ scope: 'account', subject: `account:${key.accountId}`, limits: key.accountLimits });

    const tokens = tokenEstimate(ctx);
    const tooLarge = tooLargeFor(ctx, scoped, tokens);
    if (tooLarge !== undefined) {
      // As OpenAI's "Request too large": no wait makes it fit, so no Retry-After, and the SDKs are
      // told not to retry (x-should-retry: false). Nothing is charged, requests/min included.
      noteRateLimitHit(ctx, { scope: tooLarge.scope, limit: 'tokens' });
      return reject('ZN_ERR_RATE_LIMITED', requestTooLargeMessage(ctx, tooLarge, tokens), { retryable: false });
    }
    const units = requestUnits(ctx);
    const tooManyCalls = tooManyCallsFor(scoped, units);
    if (tooManyCalls !== undefined) {
      // As "Request too large": no wait lets it in (it would be charged more than the whole window),
      // so no Retry-After and x-should-retry: false; nothing is charged.
      noteRateLimitHit(ctx, { scope: tooManyCalls.scope, limit: 'requests' });
      return reject(
        'ZN_ERR_RATE_LIMITED',
        `Batch too large for the requests per minute limit of this ${tooManyCalls.scope}: limit ${tooManyCalls.limit}, the batch holds ${units} tools/call messages (each counts as a request). Send fewer calls per batch; retrying does not help.`,
        { retryable: false },
      );
    }
    const rates: RateCheck[] = [];
    const rateScopes: LimitScope[] = [];
    const slots: SlotCheck[] = [];
    const slotScopes: LimitScope[] = [];
    for (const { scope, subject, limits } of scoped) {
      if (limits.requestsPerMinute !== undefined) {
        rates.push({ subject, metric: 'requests', limit: limits.requestsPerMinute, charge: chargeFor(units, limits.requestsPerMinute) });
        rateScopes.push(scope);
      }
      // Tool calls are priced per call and carry no token usage (stage meter): tokens/min is not theirs.
      if (limits.tokensPerMinute !== undefined && ctx.api !== 'mcp') {
        rates.push({ subject, metric: 'tokens', limit: limits.tokensPerMinute, charge: chargeFor(tokens, limits.tokensPerMinute) });
        rateScopes.push(scope);
      }
      if (limits.concurrentRequests !== undefined) {
        slots.push({ subject, limit: limits.concurrentRequests });
        slotScopes.push(scope);
      }
    }

    const keySlot = key.keyLimits.concurrentRequests !== undefined;
    const accountSlot = key.accountId !== null && key.accountLimits.concurrentRequests !== undefined;
    const adopt = keySlot || accountSlot ? this.adoptions(key, keySlot, accountSlot) : NO_ADOPTIONS;

    if (rates.length === 0 && slots.length === 0 && adopt.length === 0) {
      // Nothing to check (a tool call of a key limited only by tokens/min): no store round trip,
      // which with replicas is a write transaction on the shared file.
      this.trackUntilEnd(ctx, key, false, true, true);
      return undefined;
    }
    const nowMs = ctx.clock.now();
    const slotId = slots.length > 0 ? `${this.slotPrefix}:${++this.slotSeq}` : '';
    let outcome;
    try {
      outcome = this.store.admit({ nowMs, rates, slots, slotId, adopt });
    } catch (err) {
      // The limit store is protection, not the service: a broken file must not take callers down.
      this.warn(nowMs, err, 'rate limit store failed; request admitted without limits');
      noteRateLimitStoreFailure(ctx);
      // It holds no slot: a later admit adopts it (as it does those it could not adopt now).
      this.trackUntilEnd(ctx, key, false, true, true);
      return undefined;
    }
    // Taken whether this request is admitted or not: they run either way.
    for (const adoption of adopt) this.adopted(adoption);

    this.setRateHeaders(ctx, rates, outcome, nowMs);

    if (outcome.failedRate >= 0) {
      // The message and metrics name the first limit that did not fit; the wait is the longest
      // among all that do not fit (a wait of 0 for those that do), so a retry at Retry-After is not
      // refused by another limit that needed longer.
      const check = rates[outcome.failedRate] as RateCheck;
      const scope = rateScopes[outcome.failedRate] ?? 'key';
      let waitMs = 0;
      for (const [index, rate] of rates.entries()) {
        const counts = outcome.windows[index] ?? { prev: 0, cur: 0 };
        const at = judgedAt(outcome, index, nowMs);
        waitMs = Math.max(waitMs, at - nowMs + msUntilFits(counts, rate.charge, rate.limit, at));
      }
      ctx.responseHeaders['retry-after'] = String(Math.max(1, Math.ceil(waitMs / 1000)));
      noteRateLimitHit(ctx, { scope, limit: check.metric });
      return reject(
        'ZN_ERR_RATE_LIMITED',
        `Rate limit reached: ${check.metric} per minute for this ${scope} (limit ${check.limit}); retry after the time in Retry-After.`,
      );
    }
    if (outcome.failedSlot >= 0) {
      const check = slots[outcome.failedSlot] as SlotCheck;
      const scope = slotScopes[outcome.failedSlot] ?? 'key';
      ctx.responseHeaders['retry-after'] = String(CONCURRENCY_RETRY_AFTER_S);
      noteRateLimitHit(ctx, { scope, limit: 'concurrency' });
      return reject('ZN_ERR_CONCURRENCY_LIMITED', `Too many requests are running at once for this ${scope} (limit ${check.limit}).`);
    }

    this.trackUntilEnd(ctx, key, slots.length > 0 ? slotId : false, !keySlot, !accountSlot);
    // Each charge is trued up in the minute it was made in (the store's answer after a clock step back).
    // Built only for tokens checks (most requests have none): nothing allocated per rate check on the hot path.
    const tokenChecks: Array<RateCheck & { admittedMinute: number }> = [];
    for (let i = 0; i < rates.length; i++) {
      const r = rates[i]!;
      if (r.metric === 'tokens') tokenChecks.push({ ...r, admittedMinute: outcome.chargedMinutes?.[i] ?? minuteOf(nowMs) });
    }
    if (tokenChecks.length > 0) {
      ctx.cleanups.push(() => {
        const used = ctx.usage.inputTokens + ctx.usage.outputTokens;
        const changes = tokenTrueUp(tokenChecks, used, minuteOf(ctx.clock.now()));
        if (changes.length > 0) this.safely(() => this.store.change(changes), 'token true-up failed; the store writes it later');
      });
    }
    return undefined;
  }

  /**
   * Registers the end of an admitted request (and its early release, releaseConcurrencySlot): frees
   * `slotId` (false: it holds none), and tracks it meanwhile as in flight without a slot for its key
   * and/or account, so a limit set there later counts it.
   */
  private trackUntilEnd(ctx: PipelineContext, key: CallerKey, slotId: string | false, noKeySlot: boolean, noAccountSlot: boolean): void {
    if (noKeySlot) track(this.unslottedByKey, key.id, ctx);
    if (noAccountSlot && key.accountId !== null) track(this.unslottedByAccount, key.accountId, ctx);
    let release: () => void;
    if (slotId === false) release = () => this.ended(ctx, key);
    else {
      let held = true;
      release = () => {
        if (held) {
          held = false;
          this.safely(() => this.store.release(slotId), 'freeing a concurrency slot failed; the store frees it later');
        }
        this.ended(ctx, key);
      };
    }
    ctx.releaseSlot = release;
    ctx.cleanups.push(release);
  }

  /** Slots for this process's requests in flight that the key's (account's) new concurrency limit does not count yet. */
  private adoptions(key: CallerKey, keySlot: boolean, accountSlot: boolean): readonly Adoption[] {
    const byKey = keySlot ? this.unslottedByKey.get(key.id) : undefined;
    const byAccount = accountSlot && key.accountId !== null ? this.unslottedByAccount.get(key.accountId) : undefined;
    if (byKey === undefined && byAccount === undefined) return NO_ADOPTIONS;
    const adopt: Adoption[] = [];
    for (const ctx of byKey ?? []) {
      adopt.push({ slotId: `${this.slotPrefix}:${++this.slotSeq}`, subject: `key:${key.id}`, ctx, unslotted: this.unslottedByKey, id: key.id });
    }
    for (const ctx of byAccount ?? []) {
      adopt.push({ slotId: `${this.slotPrefix}:${++this.slotSeq}`, subject: `account:${key.accountId}`, ctx, unslotted: this.unslottedByAccount, id: key.accountId! });
    }
    return adopt;
  }

  /** The store holds the adopted slot now: the request counts there until it ends. */
  private adopted({ slotId, ctx, unslotted, id }: Adoption): void {
    untrack(unslotted, id, ctx);
    const held = this.adoptedSlots.get(ctx);
    if (held === undefined) this.adoptedSlots.set(ctx, [slotId]);
    else held.push(slotId);
  }

  /** The request ended (or freed its slot early): no longer in flight here, its adopted slots freed. */
  private ended(ctx: PipelineContext, key: CallerKey): void {
    untrack(this.unslottedByKey, key.id, ctx);
    if (key.accountId !== null) untrack(this.unslottedByAccount, key.accountId, ctx);
    if (this.adoptedSlots.size === 0) return;
    const adopted = this.adoptedSlots.get(ctx);
    if (adopted === undefined) return;
    this.adoptedSlots.delete(ctx);
    for (const slotId of adopted) this.safely(() => this.store.release(slotId), 'freeing a concurrency slot failed; the store frees it later');
  }

  close(): void {
    // A stop that finds the shared file locked (another replica's long write) still stops: this
    // replica's slots and lease then run out with the lease, as a killed replica's do.
    this.safely(() => this.store.close(), 'freeing the rate limit slots at stop failed; they expire with the replica lease');
  }

  /** x-ratelimit-{limit,remaining,reset}-{requests,tokens} for the tightest limit of each metric. */
  private setRateHeaders(ctx: PipelineContext, rates: RateCheck[], outcome: AdmitOutcome, nowMs: number): void {
    for (const metric of ['requests', 'tokens'] as const satisfies readonly RateMetric[]) {
      let best: { limit: number; remaining: number; resetMs: number } | undefined;
      for (const [index, check] of rates.entries()) {
        if (check.metric !== metric) continue;
        const before = outcome.windows[index] ?? { prev: 0, cur: 0 };
        const after = outcome.admitted ? { prev: before.prev, cur: before.cur + check.charge } : before;
        const at = judgedAt(outcome, index, nowMs);
        const remaining = Math.max(0, Math.floor(check.limit - windowUsage(after, at) + 1e-9));
        if (best === undefined || remaining < best.remaining || (remaining === best.remaining && check.limit < best.limit)) {
          best = { limit: check.limit, remaining, resetMs: at - nowMs + msUntilEmpty(after, at) };
        }
      }
      if (best === undefined) continue;
      ctx.responseHeaders[`x-ratelimit-limit-${metric}`] = String(best.limit);
      ctx.responseHeaders[`x-ratelimit-remaining-${metric}`] = String(best.remaining);
      ctx.responseHeaders[`x-ratelimit-reset-${metric}`] = formatReset(best.resetMs);
    }
  }

  private safely(fn: () => void, message: string): void {
    try {
      fn();
    } catch (err) {
      this.warn(Date.now(), err, message);
    }
  }

  /** At most one warning a minute: a broken store would otherwise log on every request. */
  private warn(nowMs: number, err: unknown, message: string): void {
    if (nowMs - this.warnedAt < 60_000) return;
    this.warnedAt = nowMs;
    this.logger.warn({ err }, message);
  }
}
