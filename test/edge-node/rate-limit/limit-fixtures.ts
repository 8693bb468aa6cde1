// Pipeline contexts as the rate-limit stage sees them (after authenticate), a clock moved by hand, and
// replicas sharing one SQLite limit file.
import type { RateLimits } from '../../../proto/src/index.js';
import type { Clock } from '../../../edge-node/src/pipeline/clock.js';
import type { ApiKind, PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import { newPipelineContext } from '../../../edge-node/src/pipeline/new-context.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import type { Logger } from '../../../edge-node/src/logger.js';
import { AbortSwitch } from '../../../edge-node/src/pipeline/abort-switch.js';
import { NodeRateLimiter } from '../../../edge-node/src/rate-limit/node-rate-limiter.js';
import { SqliteLimitStore } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';

/** A whole minute, so tests know where each window starts. */
export const T0 = 1_800_000_000_000 - (1_800_000_000_000 % 60_000);

/**
 * A clock moved by hand. `advance` is time passing: every reading moves. Setting `ms` sets the wall
 * clock alone, as a step does (NTP, a hand-set date, a VM resume): the monotonic readings stay.
 */
export class ManualClock implements Clock {
  /** The monotonic readings (`monotonic`, `hostMonotonic`). */
  private monotonicMs: number;
  /** `ms`: the wall clock (Unix ms); `monotonicMs`: where the monotonic readings start (default: the same). */
  constructor(
    public ms = T0,
    monotonicMs = ms,
  ) {
    this.monotonicMs = monotonicMs;
  }
  now(): number {
    return this.ms;
  }
  monotonic(): number {
    return this.monotonicMs;
  }
  hostMonotonic(): number {
    return this.monotonicMs;
  }
  advance(ms: number): void {
    this.ms += ms;
    this.monotonicMs += ms;
  }
}

export const quietLogger: Logger = createLogger({ level: 'silent' });

let nextId = 0;

export interface CallOptions {
  keyId?: string;
  accountId?: string | null;
  keyLimits?: RateLimits;
  accountLimits?: RateLimits;
  api?: ApiKind;
  estimatedInputTokens?: number;
  maxOutputTokens?: number | null;
}

/** A request of key `keyId` (account `accountId`), with only the fields the limiter reads set for real. */
export function callContext(clock: Clock, opts: CallOptions = {}): PipelineContext {
  nextId += 1;
  const ctx = newPipelineContext({
    requestId: `req-${nextId}`,
    api: opts.api ?? 'chat.completions',
    surface: 'model',
    http: { method: 'POST', path: '/v1/chat/completions', headers: {}, rawHeaders: [], params: {} },
    body: undefined,
    deps: undefined as never,
    clock,
    callerGone: new AbortSwitch(),
  });
  Object.assign(ctx, {
    model: 'echo',
    maxOutputTokens: opts.maxOutputTokens ?? null,
    estimatedInputTokens: opts.estimatedInputTokens ?? 0,
    key: {
      id: opts.keyId ?? 'key-a',
      accountId: opts.accountId === undefined ? 'acct-1' : opts.accountId,
      keyLimits: opts.keyLimits ?? {},
      accountLimits: opts.accountLimits ?? {},
      guardrailPolicyId: null,
      allowedModels: null,
    },
  });
  return ctx;
}

/** What the runner does at the very end of a request. */
export function finish(ctx: PipelineContext, usage?: { inputTokens: number; outputTokens: number }): void {
  if (usage !== undefined) ctx.usage = { ...usage, estimated: false };
  for (const cleanup of ctx.cleanups.splice(0)) cleanup();
}

/**
 * One replica on the limit file in `dir`: its store's heartbeat timer off (the test beats it by hand
 * on `clock`), its limiter closed when the test ends.
 */
export function sqliteReplica(t: { teardown(fn: () => unknown): void }, dir: string, clock: ManualClock): { limiter: NodeRateLimiter; store: SqliteLimitStore } {
  const store = new SqliteLimitStore({ location: dir, clock, heartbeatTimer: false });
  const limiter = new NodeRateLimiter(store, quietLogger);
  t.teardown(() => limiter.close());
  return { limiter, store };
}
