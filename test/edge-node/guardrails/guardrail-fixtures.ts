// Guardrail test helpers: a pipeline context with just what the guardrail stages read, a policy
// builder, and two small stream providers (OpenAI-chunk and Anthropic-event shaped) whose events
// re-serialise from their parsed JSON when a guardrail rewrites their text, as real providers do.
import type { GuardrailPolicy, GuardrailRule } from '../../../proto/src/index.js';
import type { RuntimeConfig } from '../../../edge-node/src/config/runtime-config.js';
import type { ErrorCode } from '../../../edge-node/src/errors.js';
import { zenovaError } from '../../../edge-node/src/errors.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { systemClock } from '../../../edge-node/src/pipeline/clock.js';
import type { PipelineContext, SseEvent, StreamEvent, TextSlot, UpstreamReply } from '../../../edge-node/src/pipeline/context.js';
import type { PipelineDeps } from '../../../edge-node/src/pipeline/deps.js';
import { newPipelineContext } from '../../../edge-node/src/pipeline/new-context.js';
import { AbortSwitch } from '../../../edge-node/src/pipeline/abort-switch.js';

export function policy(id: string, rules: Array<Partial<GuardrailRule> & Pick<GuardrailRule, 'detector' | 'action'>>): GuardrailPolicy {
  return { id, name: id, rules: rules.map((r) => ({ on: 'both', ...r })) };
}

export interface GuardContext {
  ctx: PipelineContext;
  logLines: string[];
}

/** A bare context for a provider's `identify` (no deps, no key): what the walk and estimate tests need. */
export function providerContext(api: 'chat.completions' | 'messages', body: unknown): PipelineContext {
  return newPipelineContext({
    requestId: 'req_test',
    api,
    surface: 'model',
    http: { method: 'POST', path: api === 'messages' ? '/v1/messages' : '/v1/chat/completions', headers: {}, rawHeaders: [], params: {} },
    body,
    deps: undefined as never,
    clock: systemClock,
    callerGone: new AbortSwitch(),
  });
}

/** An OpenAI-shaped secret, and the same with its "A" written as a JSON escape. */
export const TOOL_SECRET = 'sk-proj-Abc123Def456Ghi789Jkl0';
export const ESCAPED_TOOL_SECRET = 'sk-proj-\\u0041bc123Def456Ghi789Jkl0';
/** Rules for the tool-input tests: e-mails masked, secrets and the keyword "aurora" blocked, both ways. */
export const TOOL_RULES: GuardrailRule[] = [
  { detector: 'email', action: 'mask', on: 'both' },
  { detector: 'secret', action: 'block', on: 'both' },
  { detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'both' },
];

/** A context whose key uses `policyId` (null: no policy) out of `policies`. */
export function guardContext(opts: { policies?: GuardrailPolicy[]; policyId?: string | null; inputTexts?: TextSlot[]; reply?: UpstreamReply; stream?: boolean }): GuardContext {
  const logLines: string[] = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void logLines.push(line) } });
  const config = { guardrailPolicies: new Map((opts.policies ?? []).map((p) => [p.id, p])) } as unknown as RuntimeConfig;
  const deps = { nodeId: 'local', logger } as unknown as PipelineDeps;
  const ctx = newPipelineContext({
    requestId: 'req_test',
    api: 'chat.completions',
    surface: 'model',
    http: { method: 'POST', path: '/v1/chat/completions', headers: {}, rawHeaders: [], params: {} },
    body: {},
    deps,
    clock: systemClock,
    callerGone: new AbortSwitch(),
    config,
  });
  Object.assign(ctx, {
    model: 'echo',
    stream: opts.stream ?? false,
    inputTexts: opts.inputTexts ?? [],
    key: { id: 'key-1', accountId: null, keyLimits: {}, accountLimits: {}, guardrailPolicyId: opts.policyId ?? null, allowedModels: null },
    ...(opts.reply === undefined ? {} : { reply: opts.reply }),
  });
  return { ctx, logLines };
}

/** An event over parsed JSON: its `data` is serialised from the object when written (after any rewrite). */
class JsonEvent implements StreamEvent {
  readonly texts: TextSlot[];
  constructor(
    private readonly event: string | undefined,
    readonly json: Record<string, unknown>,
    text: { holder: Record<string, unknown>; field: string } | undefined,
    readonly terminal?: boolean,
  ) {
    this.texts = text === undefined ? [] : [fieldSlot(text.holder, text.field)];
  }
  get sse(): SseEvent {
    const data = JSON.stringify(this.json);
    return this.event === undefined ? { data } : { event: this.event, data };
  }
}

async function* iterate(events: StreamEvent[]): AsyncGenerator<StreamEvent> {
  for (const e of events) yield e;
}

export type StreamReply = Extract<UpstreamReply, { kind: 'stream' }>;

/** OpenAI chat chunks: a role chunk, one chunk per delta, a finish chunk, then `[DONE]` (terminal). */
export function openAiStream(deltas: string[]): StreamReply & { closed: () => boolean } {
  let closed = false;
  const chunk = (delta: Record<string, unknown>, finish: string | null): Record<string, unknown> => ({
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    model: 'echo',
    choices: [{ index: 0, delta, finish_reason: finish }],
  });
  const textEvent = (text: string): StreamEvent => {
    const delta = { content: text };
    return new JsonEvent(undefined, chunk(delta, null), { holder: delta, field: 'content' });
  };
  const events: StreamEvent[] = [
    new JsonEvent(undefined, chunk({ role: 'assistant' }, null), undefined),
    ...deltas.map(textEvent),
    new JsonEvent(undefined, chunk({}, 'stop'), undefined),
    { sse: { data: '[DONE]' }, texts: [], terminal: true },
  ];
  async function* events$(): AsyncGenerator<StreamEvent> {
    try {
      yield* iterate(events);
    } finally {
      closed = true;
    }
  }
  return {
    kind: 'stream',
    status: 200,
    headers: {},
    events: events$(),
    textEvent: (text) => textEvent(text),
    errorEvent: (code: ErrorCode, message: string) => ({ sse: { event: 'error', data: JSON.stringify(zenovaError(code, message).toBody()) }, texts: [] }),
    closed: () => closed,
  };
}

/** Anthropic events: message_start, then per text block start / deltas (+ a ping) / stop, message_delta, message_stop. */
export function anthropicStream(blocks: string[][]): StreamReply {
  const delta = (index: number, text: string): StreamEvent => {
    const d = { type: 'text_delta', text };
    return new JsonEvent('content_block_delta', { type: 'content_block_delta', index, delta: d }, { holder: d, field: 'text' });
  };
  const events: StreamEvent[] = [new JsonEvent('message_start', { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', content: [] } }, undefined)];
  blocks.forEach((deltas, index) => {
    events.push(new JsonEvent('content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } }, undefined));
    deltas.forEach((text, i) => {
      events.push(delta(index, text));
      if (i === 0) events.push(new JsonEvent('ping', { type: 'ping' }, undefined));
    });
    events.push(new JsonEvent('content_block_stop', { type: 'content_block_stop', index }, undefined));
  });
  events.push(new JsonEvent('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn' } }, undefined));
  events.push(new JsonEvent('message_stop', { type: 'message_stop' }, undefined, true));
  return {
    kind: 'stream',
    status: 200,
    headers: {},
    events: iterate(events),
    textEvent: (text, like) => delta(((JSON.parse(like.sse.data) as { index: number }).index), text),
    errorEvent: (code, message) => ({ sse: { event: 'error', data: JSON.stringify({ type: 'error', error: { type: code, message } }) }, texts: [], terminal: true }),
  };
}

function fieldSlot(holder: Record<string, unknown>, field: string): TextSlot {
  return {
    get text(): string {
      return holder[field] as string;
    },
    set text(v: string) {
      holder[field] = v;
    },
  };
}

/** Pulls every event of a (guarded) stream; `error` is what the stream threw, if anything. */
export async function drain(reply: StreamReply): Promise<{ events: SseEvent[]; error: unknown }> {
  const events: SseEvent[] = [];
  try {
    for await (const e of reply.events) events.push(e.sse);
  } catch (error) {
    return { events, error };
  }
  return { events, error: undefined };
}

/** The text a caller reassembles from OpenAI chunks. */
export function openAiText(events: SseEvent[]): string {
  let text = '';
  for (const e of events) {
    if (e.data === '[DONE]') continue;
    const chunk = JSON.parse(e.data) as { choices: Array<{ delta: { content?: string } }> };
    text += chunk.choices[0]?.delta.content ?? '';
  }
  return text;
}
