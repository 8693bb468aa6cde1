// The Anthropic provider's own parts, without HTTP: request validation and text slots, the SSE
// stream as pipeline events (usage, text, terminal, rewriting, failures) and the error bodies.
import t from 'tap';
import type { PipelineContext, StreamEvent } from '../../edge-node/src/pipeline/context.js';
import { systemClock } from '../../edge-node/src/pipeline/clock.js';
import { newPipelineContext } from '../../edge-node/src/pipeline/new-context.js';
import { messagesApi } from '../../edge-node/src/providers/anthropic/messages.js';
import { anthropicStreamEvents, errorStreamEvent } from '../../edge-node/src/providers/anthropic/messages-stream.js';
import { anthropicErrorBodyOf, anthropicErrorType } from '../../edge-node/src/providers/anthropic/anthropic-errors.js';
import { isZenovaError, zenovaError } from '../../edge-node/src/errors.js';
import { AbortSwitch } from '../../edge-node/src/pipeline/abort-switch.js';

/** These streams come whole from memory: no gap to bound. */
const NO_IDLE_DEADLINE = { ms: 60_000, stop: (): void => undefined };

/** The fields the provider reads and writes; the rest of the context is the runner's. */
function context(body: unknown, headers: Record<string, string> = {}): PipelineContext {
  return newPipelineContext({
    requestId: 'req_test',
    api: 'messages',
    surface: 'model',
    http: { method: 'POST', path: '/v1/messages', headers, rawHeaders: Object.entries(headers).flat(), params: {} },
    body,
    deps: undefined as never,
    clock: systemClock,
    callerGone: new AbortSwitch(),
  });
}

const VALID = {
  model: 'claude',
  max_tokens: 64,
  system: 'be brief',
  messages: [
    { role: 'user', content: 'first question' },
    { role: 'assistant', content: [{ type: 'text', text: 'an answer' }] },
    {
      role: 'user',
      content: [
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
        { type: 'tool_result', tool_use_id: 'tu_1', content: 'tool says hi' },
        { type: 'text', text: 'second question' },
      ],
    },
  ],
  stream: true,
  temperature: 0.5,
  metadata: { user_id: 'u-1' },
  tools: [{ name: 'lookup', input_schema: { type: 'object' } }],
};

t.test('identify reads model, stream, max_tokens and every piece of caller text, and slots rewrite the forwarded body only', async (t) => {
  const ctx = context(structuredClone(VALID));
  t.equal(messagesApi.identify(ctx), undefined);
  t.equal(ctx.model, 'claude');
  t.equal(ctx.stream, true);
  t.equal(ctx.maxOutputTokens, 64);
  t.same(
    ctx.inputTexts.map((s) => s.text),
    ['be brief', 'first question', 'an answer', 'tool says hi', 'second question'],
  );
  t.ok(ctx.estimatedInputTokens > 0);
  t.same((ctx.forwardBody as { tools: unknown }).tools, VALID.tools, 'fields the node does not read pass through');

  for (const slot of ctx.inputTexts) slot.text = slot.text.toUpperCase();
  const forwarded = ctx.forwardBody as typeof VALID;
  t.equal(forwarded.system, 'BE BRIEF');
  t.equal(forwarded.messages[0]?.content, 'FIRST QUESTION');
  t.same(forwarded.messages[2]?.content, [VALID.messages[2]!.content[0], { ...(VALID.messages[2]!.content[1] as object), content: 'TOOL SAYS HI' }, { type: 'text', text: 'SECOND QUESTION' }]);
  t.equal((ctx.body as typeof VALID).system, 'be brief', 'the body as received is untouched');
});

t.test('identify refuses invalid requests with ZN_ERR_INVALID_REQUEST naming the field', async (t) => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['no max_tokens', { model: 'm', messages: [{ role: 'user', content: 'x' }] }, /max_tokens/],
    ['max_tokens 0', { model: 'm', max_tokens: 0, messages: [{ role: 'user', content: 'x' }] }, /max_tokens/],
    ['fractional max_tokens', { model: 'm', max_tokens: 1.5, messages: [{ role: 'user', content: 'x' }] }, /max_tokens/],
    ['empty messages', { model: 'm', max_tokens: 5, messages: [] }, /messages/],
    ['system role in messages', { model: 'm', max_tokens: 5, messages: [{ role: 'system', content: 'x' }] }, /messages\[0\]\.role/],
    ['content a number', { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 5 }] }, /messages\[0\]\.content/],
    ['text block without text', { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'text' }] }] }, /messages\[0\]\.content/],
    ['no model', { max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }, /model/],
    ['stream not a boolean', { model: 'm', max_tokens: 5, stream: 'yes', messages: [{ role: 'user', content: 'x' }] }, /stream/],
    ['not an object', ['a'], /JSON object/],
  ];
  for (const [what, body, field] of cases) {
    const result = messagesApi.identify(context(body));
    t.equal(result?.error.code, 'ZN_ERR_INVALID_REQUEST', what);
    t.match(result?.error.message, field, `${what}: names the field`);
  }
  const badVersion = messagesApi.identify(context({ ...VALID }, { 'anthropic-version': 'latest\r' }));
  t.equal(badVersion?.error.code, 'ZN_ERR_INVALID_REQUEST', 'a malformed anthropic-version header is refused');
  const badBeta = messagesApi.identify(context({ ...VALID }, { 'anthropic-beta': 'a b;c' }));
  t.equal(badBeta?.error.code, 'ZN_ERR_INVALID_REQUEST', 'a malformed anthropic-beta header is refused');
});

function sse(events: Array<[string, unknown]>, tail = ''): Uint8Array[] {
  const text = events.map(([event, data]) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`).join('') + tail;
  // Cut into awkward pieces so events straddle chunks.
  const bytes = Buffer.from(text);
  const chunks: Uint8Array[] = [];
  for (let i = 0; i < bytes.length; i += 7) chunks.push(bytes.subarray(i, i + 7));
  return chunks;
}

async function* source(chunks: Uint8Array[], fail?: Error): AsyncGenerator<Uint8Array> {
  for (const chunk of chunks) yield chunk;
  if (fail) throw fail;
}

const STREAM: Array<[string, unknown]> = [
  ['message_start', { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real-1', content: [], usage: { input_tokens: 11, cache_read_input_tokens: 4, output_tokens: 1 } } }],
  ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
  ['ping', { type: 'ping' }],
  ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hello ' } }],
  ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'secret world' } }],
  ['content_block_stop', { type: 'content_block_stop', index: 0 }],
  ['message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 7 } }],
  ['message_stop', { type: 'message_stop' }],
];

async function collect(events: AsyncIterable<StreamEvent>, onEach?: (e: StreamEvent) => void): Promise<StreamEvent[]> {
  const out: StreamEvent[] = [];
  for await (const event of events) {
    onEach?.(event);
    out.push(event);
  }
  return out;
}

t.test('a stream becomes events: alias in message_start, usage recorded, text slots, message_stop terminal', async (t) => {
  const ctx = context(VALID);
  let released = 0;
  const events = await collect(
    anthropicStreamEvents(source(sse(STREAM)), { ctx, upstream: 'up', alias: 'claude', sentAt: performance.now(), signal: new AbortSwitch(), release: () => void released++, idle: NO_IDLE_DEADLINE }),
    (event) => {
      for (const slot of event.texts) if (slot.text.includes('secret')) slot.text = slot.text.replace('secret', '******');
    },
  );
  t.same(events.map((e) => e.sse.event), STREAM.map(([name]) => name));
  t.equal((JSON.parse(events[0]!.sse.data) as { message: { model: string } }).message.model, 'claude', 'the caller sees its alias');
  t.same(ctx.upstreamUsage, { inputTokens: 15, outputTokens: 7, partial: false }, 'cached input counts as input; output from message_delta');
  t.same(events.map((e) => e.texts.length), [0, 0, 0, 1, 1, 0, 0, 0]);
  t.same(JSON.parse(events[4]!.sse.data), { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: '****** world' } }, 'a rewritten text is re-serialised');
  t.equal(events[3]!.sse.data, JSON.stringify(STREAM[3]![1]), 'an untouched event keeps the upstream bytes');
  t.same(events.map((e) => e.terminal === true), [false, false, false, false, false, false, false, true]);
  t.ok(ctx.upstreamMs !== null && ctx.upstreamMs >= 0);
  t.equal(released, 1, 'the upstream body is released');
});

t.test('a stream that ends without message_stop, is cut, or carries an error event fails with a node code', async (t) => {
  const run = async (chunks: Uint8Array[], fail?: Error): Promise<unknown> => {
    let released = 0;
    const ctx = context(VALID);
    try {
      await collect(anthropicStreamEvents(source(chunks, fail), { ctx, upstream: 'up', alias: 'a', sentAt: 0, signal: new AbortSwitch(), release: () => void released++, idle: NO_IDLE_DEADLINE }));
    } catch (err) {
      t.equal(released, 1, 'released on failure');
      return err;
    }
    return undefined;
  };
  const ended = await run(sse(STREAM.slice(0, 5)));
  t.ok(isZenovaError(ended) && ended.code === 'ZN_ERR_UPSTREAM_ERROR' && /message_stop/.test(ended.message), 'early end');
  const cut = await run(sse(STREAM.slice(0, 4)), Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }));
  t.ok(isZenovaError(cut) && cut.code === 'ZN_ERR_UPSTREAM_UNAVAILABLE', 'a cut connection');
  const errored = await run(sse([...STREAM.slice(0, 4), ['error', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }]]));
  t.ok(isZenovaError(errored) && errored.code === 'ZN_ERR_UPSTREAM_ERROR' && /overloaded_error/.test(errored.message), 'an upstream error event');
});

t.test('errors take Anthropic shape with our code, by status', async (t) => {
  t.same(anthropicErrorBodyOf(zenovaError('ZN_ERR_API_KEY_INVALID')), {
    type: 'error',
    error: { type: 'authentication_error', message: 'The API key is not valid.', code: 'ZN_ERR_API_KEY_INVALID', details: { error_code: 'ZN_ERR_API_KEY_INVALID' } },
  });
  t.equal(anthropicErrorType(404), 'not_found_error');
  t.equal(anthropicErrorType(429), 'rate_limit_error');
  t.equal(anthropicErrorType(402), 'billing_error');
  t.equal(anthropicErrorType(502), 'api_error');
  t.equal(anthropicErrorType(504), 'timeout_error');
  t.equal(anthropicErrorType(422), 'invalid_request_error');
  const event = errorStreamEvent('ZN_ERR_UPSTREAM_UNAVAILABLE', 'gone');
  t.equal(event.sse.event, 'error');
  t.same(JSON.parse(event.sse.data), { type: 'error', error: { type: 'api_error', message: 'gone', code: 'ZN_ERR_UPSTREAM_UNAVAILABLE', details: { error_code: 'ZN_ERR_UPSTREAM_UNAVAILABLE' } } });
});
