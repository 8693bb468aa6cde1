/**
 * Passive health of upstream targets (outlier ejection, as load balancers do it): a target (an
 * upstream and the model asked of it) whose attempts fail `failureThreshold` times in a row with a
 * connect error, a timeout or a 5xx is tried last — after the alias's healthy targets and its
 * fallbacks — for a cooldown. Without it every request paid the dead target's failure first; for a
 * host that drops packets that is the whole connect timeout (up to 10 s) on every call.
 *
 * Nothing is ever refused for health alone: an ejected target is still in the plan, only last.
 * When its cooldown is over, one request (the next one whose plan has it) tries it first, as a
 * probe; meanwhile the others keep it last. An answer (or any reply that is not a retryable
 * failure, such as a 4xx: the upstream is there) makes it healthy again; a failed probe ejects it
 * again for twice as long, up to `maxCooldownMs`.
 *
 * Per process and in memory: replicas each learn on their own, and a restart forgets. Keyed by
 * upstream name, base URL and model, so a config push that changes something else keeps what was
 * learnt, and a changed base URL starts afresh. A push that changes an upstream's key (the usual
 * cure of a target ejected for a refused key) has all that upstream's targets start afresh too
 * (`keysChanged`, called on each config swap): what the old key earned says nothing of the new one,
 * nor do the replies of attempts still under way with the old key, which are ignored. The key
 * itself is never part of the health key, so a target is still the same one to `isEjected` whatever
 * its key. Only targets that failed are held. The ejected-target
 * gauge asks `isEjected` of the served config's targets at each scrape, so the state of a target
 * the config no longer has (an old base URL) shows nowhere.
 */
import type { RuntimeConfig, RuntimeTarget, RuntimeUpstream } from '../config/runtime-config.js';

export interface TargetHealthOptions {
  /** Consecutive retryable failures that eject a target. */
  failureThreshold?: number;
  /** The first cooldown; each failed probe doubles it. */
  baseCooldownMs?: number;
  maxCooldownMs?: number;
}

/** How an attempt at a target went, as health sees it. */
export type AttemptHealth = 'reachable' | 'failed' | 'neutral';

/** A change worth logging and counting: the target is now tried last, or answers again. */
export type HealthChange = 'ejected' | 'restored';

interface TargetState {
  /** The upstream's name and the model, for forgetting an upstream's targets and naming them. */
  readonly upstream: string;
  readonly model: string;
  failures: number;
  /** Monotonic ms until which the target is tried last; 0 = not ejected. */
  ejectedUntil: number;
  /** The cooldown of the current (or next) ejection. */
  cooldownMs: number;
  /** Monotonic ms of the last ejection (also a failed probe's): replies to attempts started before it are stale. */
  ejectedAt: number;
  /** A probe was handed out since the last ejection: the next failure is its answer. */
  probing: boolean;
  /** Monotonic ms the probe was handed out: a failure of an attempt started before it is not its answer. */
  probeSince: number;
  /** Monotonic ms of the last failure, for pruning states of targets no config has any more. */
  lastFailureAt: number;
}

export const DEFAULT_FAILURE_THRESHOLD = 5;
export const DEFAULT_BASE_COOLDOWN_MS = 10_000;
export const DEFAULT_MAX_COOLDOWN_MS = 120_000;
/** States held at most; past it, those with no failure for 2 × the longest cooldown are dropped. */
const MAX_STATES = 1024;

function keyOf(target: RuntimeTarget): string {
  return `${target.upstream.name}\u0000${target.upstream.baseUrl}\u0000${target.upstreamModel}`;
}

export class TargetHealth {
  private readonly failureThreshold: number;
  private readonly baseCooldownMs: number;
  private readonly maxCooldownMs: number;
  /** Only targets with a failure since their last good reply. */
  private readonly states = new Map<string, TargetState>();
  /**
   * Upstreams (as a config snapshot held them) whose key a later config changed: replies to
   * attempts made with them are not noted. Weak, so the snapshots go when their last request does.
   */
  private readonly superseded = new WeakSet<RuntimeUpstream>();

  constructor(opts: TargetHealthOptions = {}) {
    this.failureThreshold = Math.max(1, opts.failureThreshold ?? DEFAULT_FAILURE_THRESHOLD);
    this.baseCooldownMs = opts.baseCooldownMs ?? DEFAULT_BASE_COOLDOWN_MS;
    this.maxCooldownMs = Math.max(this.baseCooldownMs, opts.maxCooldownMs ?? DEFAULT_MAX_COOLDOWN_MS);
  }

  /**
   * `plan` in the order to try it at `now` (monotonic ms): the targets not ejected in their order,
   * then the ejected ones in theirs; a target whose cooldown is over is probed by this request (at
   * most one per plan) ahead of the others of its part of the plan: an alias's own target first of
   * all, a fallback (from index `fallbacksFrom` on) first among the fallbacks only, so a healthy
   * target of the alias is never put behind a fallback's probe (the caller would wait for a dead
   * one's failure, or be served the fallback's model). The plan itself when nothing failed (the
   * usual case, free).
   */
  order(plan: RuntimeTarget[], now: number, fallbacksFrom = plan.length): RuntimeTarget[] {
    if (this.states.size === 0) return plan;
    let probe: RuntimeTarget | undefined;
    let probeIsFallback = false;
    let ejected: RuntimeTarget[] | undefined;
    const kept: RuntimeTarget[] = [];
    /** How many of `kept` are the alias's own targets (they come before every fallback). */
    let keptOwn = 0;
    for (let index = 0; index < plan.length; index++) {
      const target = plan[index]!;
      const state = this.states.get(keyOf(target));
      if (state === undefined || state.ejectedUntil === 0) {
        kept.push(target);
        if (index < fallbacksFrom) keptOwn++;
      } else if (probe === undefined && now >= state.ejectedUntil) {
        // The others keep it last while this probe runs (and if this request never gets to it).
        state.ejectedUntil = now + state.cooldownMs;
        // A probe still out (an attempt outlasting the cooldown) keeps its place: its failure is the answer.
        if (!state.probing) state.probeSince = now;
        state.probing = true;
        probe = target;
        probeIsFallback = index >= fallbacksFrom;
      } else {
        (ejected ??= []).push(target);
      }
    }
    if (probe === undefined && ejected === undefined) return plan;
    if (probe !== undefined) kept.splice(probeIsFallback ? keptOwn : 0, 0, probe);
    if (ejected !== undefined) kept.push(...ejected);
    return kept;
  }

  /**
   * Notes how an attempt at `target` that started at `startedAt` (monotonic ms; a stream is noted
   * when it ends) went; returns the change it made, if any.
   */
  note(target: RuntimeTarget, health: AttemptHealth, now: number, startedAt = now): HealthChange | undefined {
    // An attempt made with a key a config swap has since replaced: its reply (a 401 of the old key
    // while the new one is in, or an answer) says nothing of the target as it is now.
    if (this.superseded.has(target.upstream)) return undefined;
    if (health === 'neutral') {
      if (this.states.size === 0) return undefined;
      const state = this.states.get(keyOf(target));
      // A probe that ended with no verdict (a 429, the caller leaving) is no longer out: the next
      // probe's own start then counts, or a failure of an attempt older than it would be taken as its answer.
      if (state !== undefined && state.probing && startedAt >= state.probeSince) state.probing = false;
      return undefined;
    }
    if (health === 'reachable') {
      if (this.states.size === 0) return undefined;
      const key = keyOf(target);
      const state = this.states.get(key);
      if (state === undefined) return undefined;
      // A stream begun before the ejection and ending after it says nothing of the target since:
      // only an attempt made after the ejection (its probe, a last resort) puts it back.
      if (state.ejectedUntil !== 0 && startedAt < state.ejectedAt) return undefined;
      this.states.delete(key);
      return state.ejectedUntil === 0 ? undefined : 'restored';
    }
    const key = keyOf(target);
    let state = this.states.get(key);
    if (state === undefined) {
      if (this.states.size >= MAX_STATES) this.prune(now);
      state = { upstream: target.upstream.name, model: target.upstreamModel, failures: 0, ejectedUntil: 0, ejectedAt: 0, cooldownMs: this.baseCooldownMs, probing: false, probeSince: 0, lastFailureAt: now };
      this.states.set(key, state);
    }
    state.failures += 1;
    state.lastFailureAt = now;
    if (state.ejectedUntil !== 0) {
      // A failed probe: out again, for longer. Other failures while ejected (attempts that were
      // already under way when it was ejected, or made as a last resort) change nothing, or a burst
      // of calls in flight to a host that went away would run the cooldown up to its longest. A
      // failure of an attempt started before the probe (a long stream breaking) is not its answer.
      if (state.probing && startedAt >= state.probeSince) {
        state.probing = false;
        state.cooldownMs = Math.min(this.maxCooldownMs, state.cooldownMs * 2);
        state.ejectedUntil = now + state.cooldownMs;
        state.ejectedAt = now;
      }
      return undefined;
    }
    if (state.failures < this.failureThreshold) return undefined;
    state.ejectedUntil = now + state.cooldownMs;
    state.ejectedAt = now;
    return 'ejected';
  }

  /** Whether `target` is ejected (tried last) now; for status and tests. */
  isEjected(target: RuntimeTarget): boolean {
    return (this.states.get(keyOf(target))?.ejectedUntil ?? 0) !== 0;
  }

  /**
   * A config swap from `before` to `after`: every upstream whose key changed (set, removed or
   * replaced), or that `after` no longer has, starts afresh — its targets' failures, ejections and cooldowns forgotten, under any
   * base URL, and replies to attempts still under way with the old key ignored. Everything else is
   * kept as it is. Returns the targets that were ejected and so are back in their place, for the log.
   */
  keysChanged(before: RuntimeConfig, after: RuntimeConfig): Array<{ upstream: string; model: string }> {
    const changed = new Set<string>();
    for (const [name, old] of before.upstreams) {
      const next = after.upstreams.get(name);
      if (next !== undefined && next.apiKey === old.apiKey) continue;
      // Removed too: one added again later (maybe with a new key) must not find its old ejection.
      changed.add(name);
      this.superseded.add(old);
    }
    // An upstream object served again (a config swapped back in whole) is current once more.
    for (const upstream of after.upstreams.values()) this.superseded.delete(upstream);
    const restored: Array<{ upstream: string; model: string }> = [];
    if (changed.size === 0 || this.states.size === 0) return restored;
    for (const [key, state] of this.states) {
      if (!changed.has(state.upstream)) continue;
      this.states.delete(key);
      if (state.ejectedUntil !== 0 && after.upstreams.has(state.upstream)) restored.push({ upstream: state.upstream, model: state.model });
    }
    return restored;
  }

  private prune(now: number): void {
    for (const [key, state] of this.states) {
      if (now - state.lastFailureAt > 2 * this.maxCooldownMs) this.states.delete(key);
    }
  }
}

/** Every target `config`'s routes may try (weighted targets and fallbacks), once per route that has it. */
export function* targetsOf(config: RuntimeConfig): Generator<RuntimeTarget> {
  for (const route of config.routes.values()) {
    yield* route.targets;
    yield* route.fallbacks;
  }
}
