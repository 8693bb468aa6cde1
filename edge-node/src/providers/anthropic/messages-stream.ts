/**
 * An Anthropic Messages SSE stream as pipeline StreamEvents. Each upstream event is parsed once:
 * `message_start` carries the input usage (its `model` becomes the caller's alias),
 * `message_delta` the final output usage (until then the usage is partial: `estimated`),
 * `content_block_delta` the text of a `text_delta`, `thinking_delta` or (JSON, a tool_use block's
 * input in fragments) `input_json_delta` (a slot a guardrail may rewrite, after which `data` is
 * re-serialised, lazily, when written), and
 * `message_stop` is terminal. An upstream `event: error` or a stream that ends without
 * `message_stop` is a failure (thrown, so the runner ends the caller's stream with an error event).
 */
import type { ErrorCode } from '../../errors.js';
import { zenovaError } from '../../errors.js';
import type { PipelineContext, SseEvent, StreamEvent, TextSlot, Usage } from '../../pipeline/context.js';
import { classifyUpstreamFailure, isAbort } from '../../upstream/upstream-failure.js';
import { parseSse } from '../sse.js';
import { FieldSlot, NO_TEXTS, PartSlot, isRecord, tokenCount } from '../text-slot.js';
import { anthropicErrorBody } from './anthropic-errors.js';
import type { AbortSwitch } from '../../pipeline/abort-switch.js';

type Json = Record<string, unknown>;

/**
 * Input tokens as charged: Anthropic's `input_tokens` leaves out tokens written to or read from
 * the prompt cache, which are input all the same.
 */
export function anthropicInputTokens(usage: Json): number | undefined {
  const base = tokenCount(usage.input_tokens);
  if (base === undefined) return undefined;
  return base + (tokenCount(usage.cache_creation_input_tokens) ?? 0) + (tokenCount(usage.cache_read_input_tokens) ?? 0);
}

/** One parsed event; `sse` is the upstream's text until something rewrote the parsed JSON. */
export class AnthropicStreamEvent implements StreamEvent {
  texts: TextSlot[] = NO_TEXTS;
  dirty = false;
  terminal?: true;
  private wire: SseEvent;

  constructor(
    upstream: SseEvent,
    readonly parsed: Json,
  ) {
    this.wire = upstream;
  }

  /** The content block a text delta belongs to (text a guardrail adds goes to the same block). */
  get index(): number {
    return typeof this.parsed.index === 'number' ? this.parsed.index : 0;
  }

  get sse(): SseEvent {
    if (this.dirty) {
      this.wire = { event: this.wire.event ?? String(this.parsed.type), data: JSON.stringify(this.parsed) };
      this.dirty = false;
    }
    return this.wire;
  }
}

/** The text field of each delta type that carries text; `partial_json` is JSON (a tool_use block's input, in fragments). */
const DELTA_TEXT_FIELDS: Readonly<Record<string, string>> = { text_delta: 'text', thinking_delta: 'thinking', input_json_delta: 'partial_json' };
/** TextSlot.part of a tool_use block's `partial_json` (the block index is its channel). */
const TOOL_INPUT_PART = 1;

/** The slot of a content_block_delta's text, if it carries any. */
function deltaSlots(delta: Json, event: AnthropicStreamEvent): TextSlot[] {
  const type = typeof delta.type === 'string' ? delta.type : '';
  const field = Object.hasOwn(DELTA_TEXT_FIELDS, type) ? DELTA_TEXT_FIELDS[type] : undefined;
  if (field === undefined || typeof delta[field] !== 'string') return NO_TEXTS;
  if (type === 'input_json_delta') return [new PartSlot(delta, field, event, event.index, TOOL_INPUT_PART, true)];
  return [new FieldSlot(delta, field, event)];
}

/**
 * A content_block_delta event carrying `text` (held back by a guardrail) into the block of `like`,
 * the last text event of that block, as the same kind of delta (text, thinking or tool input JSON).
 */
export function deltaEventLike(text: string, like: StreamEvent): StreamEvent {
  const index = like instanceof AnthropicStreamEvent ? like.index : 0;
  const likeDelta = like instanceof AnthropicStreamEvent ? like.parsed.delta : undefined;
  const likeType = isRecord(likeDelta) && typeof likeDelta.type === 'string' && Object.hasOwn(DELTA_TEXT_FIELDS, likeDelta.type) ? likeDelta.type : 'text_delta';
  const delta: Json = { type: likeType, [DELTA_TEXT_FIELDS[likeType]!]: text };
  const event = new AnthropicStreamEvent({ event: 'content_block_delta', data: '' }, { type: 'content_block_delta', index, delta });
  event.dirty = true;
  event.texts = deltaSlots(delta, event);
  return event;
}

/** The `event: error` Anthropic sends mid-stream, with our code; the SDK raises it as an APIError. */
export function errorStreamEvent(code: ErrorCode, message: string): StreamEvent {
  return { sse: { event: 'error', data: JSON.stringify(anthropicErrorBody(code, message)) }, texts: NO_TEXTS };
}

/**
 * The upstream's counts so far. `estimated` stays true until message_delta brings the final output
 * count: message_start's output_tokens is a placeholder (1), so a stream cut before message_delta
 * is metered from the text delivered instead (stage meter).
 */
function usageOf(ctx: PipelineContext): Usage {
  ctx.upstreamUsage ??= { inputTokens: 0, outputTokens: 0, estimated: true };
  return ctx.upstreamUsage;
}

/** Reads usage and text from one upstream event; the alias goes into `message.model`. */
function toStreamEvent(ctx: PipelineContext, sse: SseEvent, upstream: string, alias: string): StreamEvent {
  let parsed: unknown;
  try {
    parsed = JSON.parse(sse.data);
  } catch {
    parsed = undefined;
  }
  if (!isRecord(parsed)) return { sse, texts: NO_TEXTS };
  const type = typeof parsed.type === 'string' ? parsed.type : sse.event;
  if (type === 'error' || sse.event === 'error') {
    const error = isRecord(parsed.error) ? parsed.error : {};
    // Only an identifier-like type is quoted: the upstream's message text is not ours to relay.
    const kind = typeof error.type === 'string' && /^[A-Za-z0-9_.-]{1,64}$/.test(error.type) ? error.type : undefined;
    throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `Upstream "${upstream}" ended the stream with an error${kind === undefined ? '' : ` (${kind})`}.`, {
      // Anthropic's own advice: overloaded and api errors are transient.
      retryable: kind === 'overloaded_error' || kind === 'api_error',
    });
  }
  const event = new AnthropicStreamEvent(sse, parsed);
  switch (type) {
    case 'message_start': {
      const message = parsed.message;
      if (isRecord(message)) {
        if (typeof message.model === 'string' && message.model !== alias) {
          message.model = alias;
          event.dirty = true;
        }
        if (isRecord(message.usage)) {
          const usage = usageOf(ctx);
          usage.inputTokens = anthropicInputTokens(message.usage) ?? usage.inputTokens;
          usage.outputTokens = tokenCount(message.usage.output_tokens) ?? usage.outputTokens;
        }
      }
      break;
    }
    case 'message_delta':
      // Cumulative counts; newer upstreams repeat the input counts here too.
      if (isRecord(parsed.usage)) {
        const usage = usageOf(ctx);
        usage.outputTokens = tokenCount(parsed.usage.output_tokens) ?? usage.outputTokens;
        usage.inputTokens = anthropicInputTokens(parsed.usage) ?? usage.inputTokens;
        usage.estimated = false;
      }
      break;
    case 'content_block_delta': {
      const delta = parsed.delta;
      if (isRecord(delta)) event.texts = deltaSlots(delta, event);
      break;
    }
    case 'message_stop':
      event.terminal = true;
      break;
  }
  return event;
}

export interface StreamOptions {
  ctx: PipelineContext;
  upstream: string;
  /** The alias the caller asked for, shown in `message.model`. */
  alias: string;
  /** monotonic ms when the request went upstream (ctx.upstreamMs is measured from it). */
  sentAt: number;
  /** Releases the upstream body (the consumer stopped early, or the stream failed). */
  release: () => void;
  signal: AbortSwitch;
}

/** The caller-facing events of one upstream stream (see the file comment). */
export async function* anthropicStreamEvents(body: AsyncIterable<Uint8Array>, opts: StreamOptions): AsyncGenerator<StreamEvent> {
  const { ctx, upstream, alias } = opts;
  let stopped = false;
  try {
    for await (const sse of parseSse(body)) {
      const event = toStreamEvent(ctx, sse, upstream, alias);
      if (event.terminal === true) stopped = true;
      yield event;
    }
  } catch (err) {
    if (isAbort(err, opts.signal)) throw err;
    throw classifyUpstreamFailure(err, upstream);
  } finally {
    opts.release();
    ctx.upstreamMs = Math.round((ctx.clock.monotonic() - opts.sentAt) * 1000) / 1000;
  }
  if (!stopped) throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `Upstream "${upstream}" ended the stream before message_stop.`);
}
