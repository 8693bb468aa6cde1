// SSE parsing and serialising (shared by the providers), and the chat stream's event rewriting:
// alias restored, usage hidden when not asked for, re-serialised only when a text was rewritten.
import t from 'tap';
import { systemClock } from '../../../edge-node/src/pipeline/clock.js';
import type { PipelineContext, StreamEvent } from '../../../edge-node/src/pipeline/context.js';
import { AbortSwitch } from '../../../edge-node/src/pipeline/abort-switch.js';
import { chatStreamReply } from '../../../edge-node/src/providers/openai/chat-stream.js';
import { parseSse, serialiseSse } from '../../../edge-node/src/providers/sse.js';
import type { UpstreamResponse } from '../../../edge-node/src/upstream/upstream-pool.js';
import { Readable } from 'node:stream';

async function events(parts: Array<string | Uint8Array>, max?: number) {
  async function* source() {
    for (const part of parts) yield part;
  }
  const out = [];
  for await (const event of parseSse(source(), max)) out.push(event);
  return out;
}

t.test('events split anywhere — inside a UTF-8 character, between CR and LF — come out whole', async (t) => {
  const bytes = Buffer.from('event: delta\r\ndata: {"t":"héllo"}\r\n\r\ndata: two\r\n\r\n', 'utf8');
  const cut = bytes.indexOf(Buffer.from('é')) + 1;
  const crlf = bytes.indexOf(Buffer.from('\r\n\r\n')) + 1;
  const parts = [bytes.subarray(0, cut), bytes.subarray(cut, crlf), bytes.subarray(crlf, bytes.length - 1), bytes.subarray(bytes.length - 1)];
  t.same(await events(parts), [{ event: 'delta', data: '{"t":"héllo"}' }, { data: 'two' }]);
});

t.test('comments and events without data are dropped; multi-line data is joined and serialised back', async (t) => {
  const parsed = await events([': keep-alive\n\nid: 4\nretry: 10\n\ndata: a\ndata: b\n\ndata:tight\n\n']);
  t.same(parsed, [{ data: 'a\nb' }, { data: 'tight' }]);
  t.equal(serialiseSse({ data: 'a\nb' }), 'data: a\ndata: b\n\n');
  t.equal(serialiseSse({ event: 'ping', data: '{}' }), 'event: ping\ndata: {}\n\n');
});

t.test('a body that ends inside its last event drops that event unless it is whole: [DONE], an error event, or a JSON object or array', async (t) => {
  const first = 'data: {"n":1}\n\n';
  t.same(await events([first, 'data: [DONE]']), [{ data: '{"n":1}' }, { data: '[DONE]' }], '[DONE] without its blank line counts');
  t.same(await events([first, 'event: message_stop\ndata: {"type":"message_stop"}\n']), [{ data: '{"n":1}' }, { event: 'message_stop', data: '{"type":"message_stop"}' }]);
  t.same(await events([first, 'data: [1,2]']), [{ data: '{"n":1}' }, { data: '[1,2]' }]);
  // An error is an error however it ends: the providers fail the stream on it, never pass it on.
  t.same(await events([first, 'event: error\ndata: upstream said']), [{ data: '{"n":1}' }, { event: 'error', data: 'upstream said' }]);
  for (const cut of ['data: {"choices":[{"delta":{"content":"mail alice@example.com', 'data: {"n":2', 'data: plain text', 'data: 12']) {
    t.same(await events([first, cut]), [{ data: '{"n":1}' }], `dropped: ${cut}`);
  }
});

t.test('an event that never ends is refused once it outgrows the limit', async (t) => {
  async function* endless() {
    for (;;) yield `data: ${'x'.repeat(64 * 1024)}`;
  }
  await t.rejects(
    (async () => {
      for await (const event of parseSse(endless(), 256 * 1024)) void event;
    })(),
    { code: 'ZN_ERR_UPSTREAM_ERROR' },
  );
});

function fakeContext(): PipelineContext {
  return { upstreamUsage: null, upstreamFirstByteMs: 1, upstreamMs: 1, clock: systemClock } as unknown as PipelineContext;
}

function upstreamStream(lines: unknown[]): UpstreamResponse {
  const text = lines.map((l) => (typeof l === 'string' ? `data: ${l}\n\n` : `data: ${JSON.stringify(l)}\n\n`)).join('');
  return { statusCode: 200, headers: { 'content-type': 'text/event-stream' }, body: Readable.from([Buffer.from(text)]) } as unknown as UpstreamResponse;
}

/** Where the stream comes from: one choice, never aborted. */
const source = () => ({ upstream: 'demo', signal: new AbortSwitch(), sentAt: systemClock.monotonic(), choices: 1 });

const chunk = (content: string, extra: Record<string, unknown> = {}) => ({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'up-model', choices: [{ index: 0, delta: { content } }], ...extra });

async function collect(reply: ReturnType<typeof chatStreamReply>): Promise<StreamEvent[]> {
  const out: StreamEvent[] = [];
  for await (const event of reply.events) out.push(event);
  return out;
}

t.test('chat chunks get the alias back, usage is recorded, and the usage chunk is hidden from a caller who did not ask', async (t) => {
  const ctx = fakeContext();
  const usage = { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 };
  const out = await collect(chatStreamReply(ctx, upstreamStream([chunk('hi', { usage: null }), { ...chunk('', { usage }), choices: [] }, '[DONE]']), 'alias', true, source()));
  t.equal(out.length, 2, 'the usage-only chunk is dropped');
  t.same(JSON.parse(out[0]!.sse.data), { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'alias', choices: [{ index: 0, delta: { content: 'hi' } }] });
  t.equal(out[1]!.terminal, true);
  t.equal(out[1]!.sse.data, '[DONE]');
  t.same(ctx.upstreamUsage, { inputTokens: 5, outputTokens: 2, partial: false });
  const shown = await collect(chatStreamReply(fakeContext(), upstreamStream([chunk('hi', { usage: null }), { ...chunk('', { usage }), choices: [] }, '[DONE]']), 'alias', false, source()));
  t.equal(shown.length, 3, 'a caller who asked keeps the usage chunk (then [DONE])');
});

t.test('an untouched chunk keeps the upstream text byte for byte apart from the model; a rewritten text is re-serialised', async (t) => {
  const raw = '{"id":"c1","model":"up-model","choices":[{"index":0,"delta":{"content":"secret 4111"}}],"x_vendor":  1}';
  const out = await collect(chatStreamReply(fakeContext(), upstreamStream([raw, '[DONE]']), 'alias', false, source()));
  const event = out[0]!;
  t.equal(event.sse.data, raw.replace('"model":"up-model"', '"model":"alias"'), 'vendor formatting kept: not re-serialised');
  t.equal(event.texts[0]!.text, 'secret 4111');
  event.texts[0]!.text = 'secret ****';
  t.same(JSON.parse(event.sse.data), { id: 'c1', model: 'alias', choices: [{ index: 0, delta: { content: 'secret ****' } }], x_vendor: 1 });
});

t.test('a text event and an error event come out in the chat framing', async (t) => {
  const reply = chatStreamReply(fakeContext(), upstreamStream([chunk('a'), '[DONE]']), 'alias', true, source());
  const [first] = await collect(reply);
  const extra = reply.textEvent('held back', first!);
  t.match(JSON.parse(extra.sse.data), { id: 'c1', model: 'alias', choices: [{ delta: { content: 'held back' } }] });
  const error = reply.errorEvent('ZN_ERR_GUARDRAIL_BLOCKED', 'blocked');
  t.equal(error.sse.event, 'error');
  t.same(JSON.parse(error.sse.data), { error: { message: 'blocked', type: 'invalid_request_error', param: null, code: 'ZN_ERR_GUARDRAIL_BLOCKED' } });
});
