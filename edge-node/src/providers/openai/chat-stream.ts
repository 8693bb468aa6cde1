/**
 * A chat completion stream as pipeline events: each upstream `data:` chunk parsed once; the caller
 * gets its alias back in `model`; usage is recorded into ctx.upstreamUsage as it passes; when the
 * caller did not ask for usage, the usage-only chunk the node forced on is dropped again (clients
 * index choices[0]) and `"usage":null` fields are left out. An event is serialised only when it is
 * written, and only re-built from its parsed JSON when a guardrail rewrote its text (or the quick
 * in-place edit of `model` does not apply).
 */
import type { ErrorCode } from '../../errors.js';
import { zenovaError } from '../../errors.js';
import type { PipelineContext, SseEvent, StreamEvent, TextSlot, UpstreamReply, Usage } from '../../pipeline/context.js';
import type { UpstreamResponse } from '../../upstream/upstream-pool.js';
import { parseSse } from '../sse.js';
import { FieldSlot, NO_TEXTS, isRecord, tokenCount } from '../text-slot.js';

const USAGE_NULL = ',"usage":null';

/** What every event of one stream shares. */
class ChatStreamShape {
  readonly aliasJson: string;
  private upstreamModel = '';
  private needle = '';

  constructor(
    readonly alias: string,
    readonly hideUsage: boolean,
  ) {
    this.aliasJson = JSON.stringify(alias);
  }

  /** `"model":"<upstream model>"` as the upstream wrote it (cached: it is the same on every chunk). */
  modelNeedle(model: string): string {
    if (model !== this.upstreamModel) {
      this.upstreamModel = model;
      this.needle = `"model":${JSON.stringify(model)}`;
    }
    return this.needle;
  }
}

export class ChatChunkEvent implements StreamEvent {
  readonly texts: TextSlot[];
  dirty = false;
  private wire: SseEvent | undefined;

  constructor(
    private readonly upstream: SseEvent,
    private readonly chunk: Record<string, unknown>,
    private readonly shape: ChatStreamShape,
  ) {
    const choices = chunk.choices;
    let texts: TextSlot[] = NO_TEXTS;
    if (Array.isArray(choices)) {
      for (const choice of choices) {
        const delta = isRecord(choice) ? choice.delta : undefined;
        if (isRecord(delta) && typeof delta.content === 'string') {
          if (texts === NO_TEXTS) texts = [];
          texts.push(new FieldSlot(delta, 'content', this));
        }
      }
    }
    this.texts = texts;
  }

  /** id/object/created of this chunk, for a new chunk of the same completion. */
  templateFields(): Record<string, unknown> {
    const { id, object, created } = this.chunk;
    return { id, object, created };
  }

  get sse(): SseEvent {
    if (this.wire !== undefined && !this.dirty) return this.wire;
    this.wire = (this.dirty ? undefined : this.quickEdit()) ?? { data: this.rebuilt() };
    this.dirty = false;
    return this.wire;
  }

  /** The upstream's text with `model` and `usage: null` edited in place, when they are where expected. */
  private quickEdit(): SseEvent | undefined {
    const { chunk, shape } = this;
    let data = this.upstream.data;
    if (typeof chunk.model === 'string' && chunk.model !== shape.alias) {
      const needle = shape.modelNeedle(chunk.model);
      const at = data.indexOf(needle);
      if (at === -1) return undefined;
      data = `${data.slice(0, at)}"model":${shape.aliasJson}${data.slice(at + needle.length)}`;
    }
    if (shape.hideUsage && chunk.usage === null) {
      const at = data.indexOf(USAGE_NULL);
      if (at === -1) return undefined;
      data = data.slice(0, at) + data.slice(at + USAGE_NULL.length);
    }
    return this.upstream.event === undefined ? { data } : { event: this.upstream.event, data };
  }

  private rebuilt(): string {
    const { chunk, shape } = this;
    if (typeof chunk.model === 'string') chunk.model = shape.alias;
    if (shape.hideUsage && chunk.usage === null) delete chunk.usage;
    return JSON.stringify(chunk);
  }
}

/** An upstream event passed on as is (`[DONE]`, non-JSON data). */
function verbatim(sse: SseEvent, terminal: boolean): StreamEvent {
  return terminal ? { sse, texts: NO_TEXTS, terminal } : { sse, texts: NO_TEXTS };
}

export function chatUsage(value: unknown): Usage | null {
  if (!isRecord(value)) return null;
  const inputTokens = tokenCount(value.prompt_tokens);
  const outputTokens = tokenCount(value.completion_tokens) ?? 0;
  if (inputTokens === undefined) return null;
  return { inputTokens, outputTokens, estimated: false };
}

async function* chatEvents(ctx: PipelineContext, response: UpstreamResponse, shape: ChatStreamShape, answeredAt: number): AsyncGenerator<StreamEvent> {
  try {
    for await (const sse of parseSse(response.body)) {
      if (sse.data === '[DONE]') {
        yield verbatim(sse, true);
        continue;
      }
      let chunk: unknown;
      try {
        chunk = JSON.parse(sse.data);
      } catch {
        yield verbatim(sse, false);
        continue;
      }
      if (!isRecord(chunk)) {
        yield verbatim(sse, false);
        continue;
      }
      const usage = chunk.usage;
      if (isRecord(usage)) {
        ctx.upstreamUsage = chatUsage(usage) ?? ctx.upstreamUsage;
        if (shape.hideUsage && Array.isArray(chunk.choices) && chunk.choices.length === 0) continue;
      }
      yield new ChatChunkEvent(sse, chunk, shape);
    }
  } finally {
    // Stops the upstream transfer when the pipeline stopped pulling early (caller gone, failure).
    if (!response.body.readableEnded) response.body.destroy();
    ctx.upstreamMs = (ctx.upstreamFirstByteMs ?? 0) + Math.round((ctx.clock.monotonic() - answeredAt) * 1000) / 1000;
  }
}

export function chatStreamReply(ctx: PipelineContext, response: UpstreamResponse, alias: string, hideUsage: boolean): Extract<UpstreamReply, { kind: 'stream' }> {
  const shape = new ChatStreamShape(alias, hideUsage);
  return {
    kind: 'stream',
    status: 200,
    headers: {},
    events: chatEvents(ctx, response, shape, ctx.clock.monotonic()),
    textEvent(text: string, like: StreamEvent): StreamEvent {
      const base = like instanceof ChatChunkEvent ? like.templateFields() : {};
      const chunk: Record<string, unknown> = { ...base, model: alias, choices: [{ index: 0, delta: { content: text }, logprobs: null, finish_reason: null }] };
      return new ChatChunkEvent({ data: JSON.stringify(chunk) }, chunk, shape);
    },
    errorEvent(code: ErrorCode, message: string): StreamEvent {
      return { sse: { event: 'error', data: JSON.stringify(zenovaError(code, message).toBody()) }, texts: NO_TEXTS };
    },
  };
}
