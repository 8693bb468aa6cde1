/**
 * An Anthropic stream's usage counters as they run. `message_start` brings them, `message_delta`
 * repeats those that apply as cumulative totals (never increments) and leaves the others out or
 * null. So each counter (input, cache creation, cache read, output) is kept on its own: a later
 * event's number replaces it, a missing or null one keeps it, as the official SDK's MessageStream
 * accumulates them. Reading a `message_delta` that repeats `input_tokens` without the cache
 * counters as a whole would drop the prompt-cache tokens from the record and the charge. A cache
 * counter first given invalid (a string, negative, fractional) leaves the input unknown (estimated)
 * until a later event gives it validly: read as 0 it would leave those tokens unbilled.
 */
import type { CacheWrites, PromptCacheTtl } from '../../pipeline/context.js';
import { isRecord, tokenCount } from '../text-slot.js';

/** A cache counter the upstream gave, but not as a valid count. */
const INVALID = -1;

function cacheCounter(value: unknown, previous: number | undefined): number | undefined {
  if (value === undefined || value === null) return previous;
  // As for input_tokens: an invalid repeat keeps a valid earlier count.
  return tokenCount(value) ?? previous ?? INVALID;
}

/**
 * The prompt-cache writes of `total` cache-creation tokens, billed by lifetime: `cache_creation`'s
 * per-lifetime counts where validly given (never more than `total` together); the rest of the total (all of it without them) as
 * 1-hour writes when the request asked for a 1-hour lifetime anywhere (the safe side), else as
 * 5-minute ones. Undefined when nothing was written.
 */
export function cacheWritesOf(total: number, givenFiveMinute: number | undefined, givenOneHour: number | undefined, ttl: PromptCacheTtl | undefined): CacheWrites | undefined {
  // A breakdown beyond the total (an inconsistent compatible upstream) is held to it, the dearer
  // 1-hour writes first: a premium is charged only on tokens the input counts once.
  const oneHour = givenOneHour === undefined ? undefined : Math.min(givenOneHour, total);
  const fiveMinute = givenFiveMinute === undefined ? undefined : Math.min(givenFiveMinute, total - (oneHour ?? 0));
  const rest = Math.max(0, total - (fiveMinute ?? 0) - (oneHour ?? 0));
  const fiveMinuteTokens = (fiveMinute ?? 0) + (ttl === '1h' ? 0 : rest);
  const oneHourTokens = (oneHour ?? 0) + (ttl === '1h' ? rest : 0);
  return fiveMinuteTokens === 0 && oneHourTokens === 0 ? undefined : { fiveMinuteTokens, oneHourTokens };
}

/** A usage's `cache_creation` breakdown: its two per-lifetime counts, each undefined unless validly given. */
export function cacheCreationByTtl(usage: Record<string, unknown>): { fiveMinute: number | undefined; oneHour: number | undefined } {
  const breakdown = usage.cache_creation;
  if (!isRecord(breakdown)) return { fiveMinute: undefined, oneHour: undefined };
  return { fiveMinute: tokenCount(breakdown.ephemeral_5m_input_tokens), oneHour: tokenCount(breakdown.ephemeral_1h_input_tokens) };
}

export class AnthropicStreamUsage {
  private input: number | undefined;
  private cacheCreation: number | undefined;
  private cacheRead: number | undefined;
  private fiveMinuteWrites: number | undefined;
  private oneHourWrites: number | undefined;
  private output: number | undefined;
  /** Whether a message_delta gave the output count: message_start's is a placeholder (1). */
  private outputFinal = false;

  /** `ttl`: the longest prompt-cache lifetime the request asked for (cacheWritesOf). */
  constructor(private readonly ttl: PromptCacheTtl | undefined) {}

  /** Takes the counters an event's `usage` carries as numbers; the others keep their values. */
  update(usage: Record<string, unknown>): void {
    this.input = tokenCount(usage.input_tokens) ?? this.input;
    this.cacheCreation = cacheCounter(usage.cache_creation_input_tokens, this.cacheCreation);
    this.cacheRead = cacheCounter(usage.cache_read_input_tokens, this.cacheRead);
    const { fiveMinute, oneHour } = cacheCreationByTtl(usage);
    this.fiveMinuteWrites = fiveMinute ?? this.fiveMinuteWrites;
    this.oneHourWrites = oneHour ?? this.oneHourWrites;
    this.output = tokenCount(usage.output_tokens) ?? this.output;
  }

  /** A message_delta's `usage`: as update, and its output count, when valid, is the final one. */
  updateFinal(usage: Record<string, unknown>): void {
    this.update(usage);
    if (tokenCount(usage.output_tokens) !== undefined) this.outputFinal = true;
  }

  /**
   * Input tokens as charged (as anthropicInputTokens counts a JSON answer's): `input_tokens` leaves
   * out the tokens written to or read from the prompt cache, which are input all the same.
   * Unknown until `input_tokens` arrived, and while a cache counter stands invalid.
   */
  get inputTokens(): number | undefined {
    if (this.input === undefined || this.cacheCreation === INVALID || this.cacheRead === INVALID) return undefined;
    return this.input + (this.cacheCreation ?? 0) + (this.cacheRead ?? 0);
  }

  /**
   * The part of the input written to the prompt cache, by lifetime. Kept also while inputTokens is
   * unknown (another counter not validly given: the input is estimated), as a JSON answer's are
   * (anthropicCacheWrites): writes validly given still owe their premium (stage meter holds them to
   * the estimate). Undefined only when neither is known.
   */
  get cacheWrites(): CacheWrites | undefined {
    if (this.inputTokens !== undefined) return cacheWritesOf(this.cacheCreation ?? 0, this.fiveMinuteWrites, this.oneHourWrites, this.ttl);
    if (this.cacheCreation === undefined || this.cacheCreation === INVALID) return undefined;
    return cacheWritesOf(this.cacheCreation, this.fiveMinuteWrites, this.oneHourWrites, this.ttl);
  }

  /** The running output count: message_start's placeholder until a message_delta gives it. */
  get outputTokens(): number | undefined {
    return this.output;
  }

  /**
   * The final output count, once a message_delta gave one; undefined otherwise (a message_delta
   * whose output_tokens is missing or invalid leaves it to be estimated, not the placeholder).
   */
  get finalOutputTokens(): number | undefined {
    return this.outputFinal ? this.output : undefined;
  }
}
