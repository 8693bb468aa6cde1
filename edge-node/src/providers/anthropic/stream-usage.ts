/**
 * An Anthropic stream's usage counters as they run. `message_start` brings them, `message_delta`
 * repeats those that apply as cumulative totals (never increments) and leaves the others out or
 * null. So each counter (input, cache creation, cache read, output) is kept on its own: a later
 * event's number replaces it, a missing or null one keeps it, as the official SDK's MessageStream
 * accumulates them. Reading a `message_delta` that repeats `input_tokens` without the cache
 * counters as a whole would drop the prompt-cache tokens from the record and the charge.
 */
import { tokenCount } from '../text-slot.js';

export class AnthropicStreamUsage {
  private input: number | undefined;
  private cacheCreation: number | undefined;
  private cacheRead: number | undefined;
  private output: number | undefined;

  /** Takes the counters an event's `usage` carries as numbers; the others keep their values. */
  update(usage: Record<string, unknown>): void {
    this.input = tokenCount(usage.input_tokens) ?? this.input;
    this.cacheCreation = tokenCount(usage.cache_creation_input_tokens) ?? this.cacheCreation;
    this.cacheRead = tokenCount(usage.cache_read_input_tokens) ?? this.cacheRead;
    this.output = tokenCount(usage.output_tokens) ?? this.output;
  }

  /**
   * Input tokens as charged (as anthropicInputTokens counts a JSON answer's): `input_tokens` leaves
   * out the tokens written to or read from the prompt cache, which are input all the same.
   * Unknown until `input_tokens` arrived.
   */
  get inputTokens(): number | undefined {
    if (this.input === undefined) return undefined;
    return this.input + (this.cacheCreation ?? 0) + (this.cacheRead ?? 0);
  }

  get outputTokens(): number | undefined {
    return this.output;
  }
}
