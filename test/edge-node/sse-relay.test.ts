// The SSE relay: event-by-event rewriting without holding the stream, whatever the chunking.
import t from 'tap';
import { relaySse } from '../../edge-node/src/http/sse-relay.js';

const chunk = (content: string, extra: Record<string, unknown> = {}) =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', model: 'upstream-model', choices: [{ index: 0, delta: { content } }], ...extra })}\n\n`;
const usageChunk = `data: ${JSON.stringify({ id: 'c', model: 'upstream-model', choices: [], usage: { total_tokens: 7 } })}\n\n`;

async function collect(parts: Array<string | Uint8Array>, hideUsage: boolean, onUsage?: (u: Record<string, unknown>) => void): Promise<string[]> {
  async function* source() {
    for (const part of parts) yield part;
  }
  const out: string[] = [];
  for await (const piece of relaySse(source(), { alias: 'alias', hideUsage, ...(onUsage ? { onUsage } : {}) })) out.push(piece);
  return out;
}

function dataOf(text: string): unknown[] {
  return text.split('\n\n').filter((e) => e.startsWith('data: ') && !e.includes('[DONE]')).map((e) => JSON.parse(e.slice(6)) as unknown);
}

t.test('each upstream chunk is passed on as soon as it completes an event, with the alias restored', async (t) => {
  const out = await collect([chunk('a'), chunk('b'), 'data: [DONE]\n\n'], false);
  t.equal(out.length, 3, 'one piece per upstream chunk');
  t.match(dataOf(out.join('')), [{ model: 'alias', choices: [{ delta: { content: 'a' } }] }, { model: 'alias' }]);
  t.equal(out[2], 'data: [DONE]\n\n');
});

t.test('an event split across chunks, even inside a UTF-8 character or a CRLF, comes out whole', async (t) => {
  const text = chunk('héllo').replace(/\n/g, '\r\n');
  const bytes = Buffer.from(text, 'utf8');
  const cut = bytes.indexOf(Buffer.from('é')) + 1;
  const parts = [bytes.subarray(0, cut), bytes.subarray(cut, bytes.length - 1), bytes.subarray(bytes.length - 1)];
  const out = await collect(parts, false);
  t.match(dataOf(out.join('')), [{ model: 'alias', choices: [{ delta: { content: 'héllo' } }] }]);
});

t.test('usage the caller did not ask for is hidden, yet still reported', async (t) => {
  const seen: Array<Record<string, unknown>> = [];
  const out = await collect([chunk('a', { usage: null }), usageChunk, 'data: [DONE]\n\n'], true, (u) => seen.push(u));
  const events = dataOf(out.join(''));
  t.equal(events.length, 1, 'the usage-only chunk is dropped');
  t.notOk('usage' in (events[0] as object), 'usage: null is removed');
  t.same(seen, [{ total_tokens: 7 }]);
  const shown = dataOf((await collect([chunk('a', { usage: null }), usageChunk], false)).join(''));
  t.equal(shown.length, 2, 'a caller who asked gets the usage chunk');
});

t.test('comments, event names and non-JSON data pass through untouched', async (t) => {
  const out = await collect([': keep-alive\n\n', 'event: ping\ndata: not json\n\n'], false);
  t.equal(out.join(''), ': keep-alive\n\nevent: ping\ndata: not json\n\n');
});

t.test('an event that never ends is refused once it outgrows the limit', async (t) => {
  async function* endless() {
    for (;;) yield 'data: ' + 'x'.repeat(64 * 1024);
  }
  await t.rejects(
    (async () => {
      for await (const _ of relaySse(endless(), { alias: 'a', hideUsage: false, maxEventBytes: 256 * 1024 })) void _;
    })(),
    { code: 'ZN_ERR_UPSTREAM_ERROR' },
  );
});
