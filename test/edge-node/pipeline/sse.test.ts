// SSE parsing and serialising (shared by the providers), and the chat stream's event rewriting:
// alias restored, usage hidden when not asked for, re-serialised only when a text was rewritten.
import t from 'tap';
import { systemClock } from '../../../edge-node/src/pipeline/clock.js';
import type { PipelineContext, StreamEvent } from '../../../edge-node/src/pipeline/context.js';
import { AbortSwitch } from '../../../edge-node/src/pipeline/abort-switch.js';
import { chatStreamReply } from '../../../edge-node/src/providers/openai/chat-stream.js';
import { MAX_SSE_EVENT_BYTES, parseSse, serialiseSse } from '../../../edge-node/src/providers/sse.js';
import { MAX_UPSTREAM_JSON_BYTES } from '../../../edge-node/src/providers/upstream-call.js';
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

t.test('events split at every point, and a byte at a time, come out as from one chunk: CRLF, lone CR, blank lines across chunks', async (t) => {
  const text = 'event: a\r\ndata: 1\r\n\r\ndata: two\rdata: lines\r\r: note\n\ndata: three\n\n\ndata: [DONE]\r\n';
  const expected = [{ event: 'a', data: '1' }, { data: 'two\nlines' }, { data: 'three' }, { data: '[DONE]' }];
  t.same(await events([text]), expected, 'whole');
  const bytes = Buffer.from(text, 'utf8');
  const splits: string[] = [];
  for (let cut = 1; cut < bytes.length; cut++) {
    const got = await events([bytes.subarray(0, cut), bytes.subarray(cut)]);
    if (JSON.stringify(got) !== JSON.stringify(expected)) splits.push(`${cut}: ${JSON.stringify(got)}`);
  }
  t.same(splits, [], 'every split into two chunks');
  t.same(await events([...bytes].map((b) => Uint8Array.of(b))), expected, 'a byte at a time');
  t.same(await events([...text]), expected, 'a character at a time (string chunks)');
});

t.test('an event over 1 MiB passes by default: one event may be as large as a JSON answer (32 MiB)', async (t) => {
  t.equal(MAX_SSE_EVENT_BYTES, MAX_UPSTREAM_JSON_BYTES);
  const image = `data:image/png;base64,${Buffer.alloc(900 * 1024, 7).toString('base64')}`;
  const data = JSON.stringify({ choices: [{ index: 0, delta: { images: [{ type: 'image_url', image_url: { url: image } }] } }] });
  t.ok(data.length > 1024 * 1024);
  const parsed = await events(['data: {"n":1}\n\n', `data: ${data}\n\n`, 'data: [DONE]\n\n']);
  t.same(parsed.map((e) => e.data.length), [7, data.length, 6]);
  t.equal(parsed[1]!.data, data);
});

t.test('a 32 MiB event in 4 KiB chunks is parsed in time proportional to its size', async (t) => {
  const size = MAX_SSE_EVENT_BYTES - 64;
  const piece = 'x'.repeat(4096);
  // Re-scanning the buffered event for each chunk took minutes here; the source gives up past the deadline.
  const deadline = Date.now() + 20_000;
  async function* source() {
    yield 'data: ';
    for (let sent = 0; sent + piece.length <= size; sent += piece.length) {
      if (Date.now() > deadline) throw new Error('the parser took more than 20 s over one 32 MiB event');
      yield piece;
    }
    yield '\n\ndata: [DONE]\n\n';
  }
  const started = Date.now();
  const lengths: number[] = [];
  for await (const event of parseSse(source())) lengths.push(event.data.length);
  t.same(lengths, [Math.floor(size / piece.length) * piece.length, 6]);
  t.comment(`parsed in ${Date.now() - started} ms`);
});

t.test('an event past 32 MiB is refused with the default limit', async (t) => {
  const piece = 'x'.repeat(1024 * 1024);
  async function* source() {
    yield 'data: ';
    for (let i = 0; i <= 32; i++) yield piece;
    yield '\n\n';
  }
  await t.rejects(
    (async () => {
      for await (const event of parseSse(source())) void event;
    })(),
    { code: 'ZN_ERR_UPSTREAM_ERROR', message: /larger than 33554432 bytes/ },
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
const source = () => ({ upstream: 'demo', signal: new AbortSwitch(), sentAt: systemClock.monotonic(), choices: 1, timeoutMs: 30_000 });

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

/**
 * parseSse over a source that yields `parts` `gapMs` apart; the idle deadline's stop ends the source
 * at its next step, as destroying an upstream body does. Returns the events and whether it stopped.
 */
async function paced(parts: string[], gapMs: number, idleMs: number) {
  let stopped = false;
  async function* source() {
    for (const part of parts) {
      if (stopped) throw new Error('stopped by the idle deadline');
      yield part;
      await new Promise((resolve) => setTimeout(resolve, gapMs));
    }
  }
  const out = [];
  try {
    for await (const event of parseSse(source(), undefined, { ms: idleMs, stop: () => { stopped = true; } })) out.push(event);
  } catch {
    // The stop: told apart by `stopped`.
  }
  return { events: out, stopped };
}

t.test('a large event arriving in steady pieces for longer than the idle deadline is progress, not silence', async (t) => {
  const pieces = Array.from({ length: 14 }, () => 'x'.repeat(1000));
  const parts = ['data: {"first":1}\n\n', 'data: "', ...pieces, '"\n\n', 'data: [DONE]\n\n'];
  // 14 pieces 100 ms apart: 1.4 s of one event under a 1 s deadline.
  const { events: out, stopped } = await paced(parts, 100, 1000);
  t.equal(stopped, false);
  t.same(out.map((e) => e.data.length), [11, 14_002, 6]);
});

t.test('comment lines still are silence, also a comment split across pieces of an event in progress', async (t) => {
  // After the first event only comment lines arrive, each split mid-line.
  const parts = ['data: {"first":1}\n\n', ...Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? ': keep' : 'alive\n'))];
  const { events: out, stopped } = await paced(parts, 100, 500);
  t.equal(stopped, true);
  t.same(out.map((e) => e.data), ['{"first":1}']);
});
