// An answer the upstream gives no usage for (no usage chunk, or a caller that leaves before it) is
// charged for output estimated from all the text delivered, not from the part kept for the record
// (ctx.responseText stops at 256 Ki characters): a 1 000 000-character answer is ≈250 000 tokens,
// never 65 536 (docs/billing.md, "Stage settle").
import t from 'tap';
import type { Test } from 'tap';
import http from 'node:http';
import { MAX_RESPONSE_TEXT_CHARS } from '../../../edge-node/src/pipeline/run-pipeline.js';
import { waitFor } from '../../fixtures/wait-for.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';
import { pricedNode } from './priced-node.js';
import { listenForTest } from '../../fixtures/loopback-server.js';

/**
 * An OpenAI-compatible stream of `pieces` content chunks of `piece`. With `endAfter` 'usage' it
 * then finishes without a usage chunk; with 'caller-left' it sends nothing more until the node
 * drops the call (the caller left), after which its final usage could not arrive anyway.
 */
async function longStreamUpstream(t: Test, piece: string, pieces: number, endAfter: 'no-usage' | 'caller-left'): Promise<string> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const base = { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm' };
      for (let i = 0; i < pieces; i++) res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] })}\n\n`);
      if (endAfter === 'caller-left') return; // held open: the node ends it when the caller leaves
      res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`);
      res.end('data: [DONE]\n\n');
    });
  });
  return listenForTest(t, server);
}

function streamRequest(node: PipelineNode, signal?: AbortSignal): Promise<Response> {
  return fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'go' }], stream: true, max_tokens: 300_000 }),
    ...(signal === undefined ? {} : { signal }),
  });
}

/** The content characters of the chat chunks in complete SSE events. */
function contentChars(events: string): number {
  let chars = 0;
  for (const line of events.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const chunk = JSON.parse(line.slice(6)) as { choices?: Array<{ delta?: { content?: string } }> };
    chars += chunk.choices?.[0]?.delta?.content?.length ?? 0;
  }
  return chars;
}

const LATIN_PIECE = 'abcd'.repeat(250); // 1000 characters, 250 tokens
const PIECES = 1000; // 1 000 000 characters, 250 000 tokens

t.test('a stream without usage is charged for all the text it delivered, beyond what the record keeps', async (t) => {
  const { node, finished } = await pricedNode(t, await longStreamUpstream(t, LATIN_PIECE, PIECES, 'no-usage'));
  const res = await streamRequest(node);
  t.equal(res.status, 200);
  t.equal(contentChars(await res.text()), PIECES * LATIN_PIECE.length, 'the caller received the whole answer');
  const f = await waitFor(() => finished.at(-1), { what: 'the request to finish' });
  t.equal(f.status, 'ok');
  t.equal(f.keptChars, MAX_RESPONSE_TEXT_CHARS, 'the record keeps only its bound');
  t.same(f.usage, { inputTokens: f.usage.inputTokens, outputTokens: 250_000, estimated: true }, 'output estimated from all 1 000 000 characters');
  t.equal(f.cost.costMicros, f.usage.inputTokens * 1 + 250_000 * 10);
});

t.test('a caller that leaves before the usage chunk is charged for all the text it was sent', async (t) => {
  const { node, finished } = await pricedNode(t, await longStreamUpstream(t, LATIN_PIECE, PIECES, 'caller-left'));
  const leave = new AbortController();
  const res = await streamRequest(node, leave.signal);
  let delivered = 0;
  let pending = '';
  const decoder = new TextDecoder();
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      pending += decoder.decode(chunk, { stream: true });
      const end = pending.lastIndexOf('\n\n');
      if (end === -1) continue;
      delivered += contentChars(pending.slice(0, end));
      pending = pending.slice(end + 2);
      if (delivered >= PIECES * LATIN_PIECE.length) {
        leave.abort();
        break;
      }
    }
  } catch {
    // the caller's own abort
  }
  t.equal(delivered, PIECES * LATIN_PIECE.length, 'the caller received the whole answer but its usage');
  const f = await waitFor(() => finished.at(-1), { what: 'the request to finish' });
  t.equal(f.status, 'aborted');
  t.equal(f.usage.outputTokens, 250_000, 'output estimated from all 1 000 000 characters');
  t.equal(f.usage.estimated, true);
  t.equal(f.cost.costMicros, f.usage.inputTokens * 1 + 250_000 * 10);
});

t.test('CJK text past the record bound is estimated at one token per character', async (t) => {
  const piece = '漢字'.repeat(500); // 1000 CJK characters, 1000 tokens
  const pieces = 300; // 300 000 characters, beyond the 262 144 kept
  const { node, finished } = await pricedNode(t, await longStreamUpstream(t, piece, pieces, 'no-usage'));
  const res = await streamRequest(node);
  t.equal(contentChars(await res.text()), pieces * piece.length);
  const f = await waitFor(() => finished.at(-1), { what: 'the request to finish' });
  t.equal(f.usage.outputTokens, 300_000);
});
