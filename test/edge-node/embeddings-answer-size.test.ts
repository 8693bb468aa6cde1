// An embeddings answer is bounded by what the request asks for (96 KiB per input, between 32 MiB
// and 192 MiB), not by the fixed 32 MiB of other JSON answers: 2048 inputs of 3072 dimensions are
// ≈34 MB in base64 (the openai SDK's default) and more as floats, and were refused with a 502 after
// the upstream had done (and billed) the work. An answer still past its bound is refused, not
// retried, and charged the prompt estimate rather than nothing (docs/node-api.md, docs/billing.md).
import type http from 'node:http';
import t from 'tap';
import {
  EMBEDDING_ANSWER_BYTES_PER_INPUT,
  MAX_EMBEDDINGS_ANSWER_BYTES,
  embeddingsAnswerBound,
} from '../../edge-node/src/providers/openai/embeddings.js';
import { MAX_UPSTREAM_JSON_BYTES } from '../../edge-node/src/providers/upstream-call.js';
import { PRICE, startScriptedUpstreamNode } from './billing/scripted-upstream-node.js';
import type { Answer } from './billing/scripted-upstream-node.js';

const DIMENSIONS = 3072;
const MiB = 1024 * 1024;

/** A 200 whose body is `text`, as the upstream wrote it (written in pieces, as a large body comes). */
function jsonText(text: string): Answer {
  return (res: http.ServerResponse) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(text);
  };
}

function embeddingsAnswer(embeddings: unknown[], promptTokens: number, indent?: number): string {
  const data = embeddings.map((embedding, index) => ({ object: 'embedding', index, embedding }));
  return JSON.stringify({ object: 'list', model: 'demo-echo', data, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } }, null, indent);
}

const vector = Array.from({ length: DIMENSIONS }, (_, i) => Math.sin(i + 1) / 7);
const inputs = (n: number) => Array.from({ length: n }, (_, i) => `chunk number ${i} of a document being indexed for retrieval`);

t.test('the bound on an embeddings answer grows with its inputs, between the JSON answer bound and its own ceiling', async (t) => {
  t.equal(embeddingsAnswerBound('one text'), MAX_UPSTREAM_JSON_BYTES, 'one input: the bound of every JSON answer');
  t.equal(embeddingsAnswerBound([1, 2, 3]), MAX_UPSTREAM_JSON_BYTES, 'an array of token ids is one input');
  t.equal(embeddingsAnswerBound(inputs(400)), 400 * EMBEDDING_ANSWER_BYTES_PER_INPUT);
  t.equal(embeddingsAnswerBound([[1], [2], [3]]), MAX_UPSTREAM_JSON_BYTES, 'arrays of token ids: one input each');
  t.equal(embeddingsAnswerBound(inputs(2048)), MAX_EMBEDDINGS_ANSWER_BYTES, '2048 inputs reach the ceiling');
  t.equal(MAX_EMBEDDINGS_ANSWER_BYTES, 192 * MiB);
  t.equal(embeddingsAnswerBound(inputs(5000)), MAX_EMBEDDINGS_ANSWER_BYTES, 'never above the ceiling');
  const prettyFloat = `        ${(-Math.sin(7) / 7).toString()},\n`.length;
  t.ok(prettyFloat * DIMENSIONS <= EMBEDDING_ANSWER_BYTES_PER_INPUT, `3072 floats pretty-printed in full (${prettyFloat} bytes each) fit one input's allowance`);
});

t.test('embeddings answers larger than 32 MiB are delivered when the request asked for them', async (t) => {
  const node = await startScriptedUpstreamNode(t);

  await t.test('2048 inputs of 3072 dimensions in base64 (the openai SDK default)', async (t) => {
    const base64 = Buffer.from(new Float32Array(vector).buffer).toString('base64');
    const answer = embeddingsAnswer(Array.from({ length: 2048 }, () => base64), 40_960);
    t.ok(Buffer.byteLength(answer) > MAX_UPSTREAM_JSON_BYTES, `the answer (${(Buffer.byteLength(answer) / MiB).toFixed(1)} MiB) is past the fixed 32 MiB`);
    node.answer(jsonText(answer));
    const { status, text, record } = await node.post('/v1/embeddings', { model: 'echo', input: inputs(2048), encoding_format: 'base64' });
    t.equal(status, 200);
    const body = JSON.parse(text) as { data: Array<{ embedding: string }>; model: string };
    t.equal(body.data.length, 2048);
    t.equal(body.data[2047]!.embedding, base64, 'each embedding arrives whole');
    t.equal(body.model, 'echo', 'the alias, as on every answer');
    t.equal(node.calls(), 1);
    t.match(record, { status: 'ok', httpStatus: 200 });
    t.same(record.usage, { inputTokens: 40_960, outputTokens: 0, estimated: false }, "the upstream's own count");
    t.equal(record.cost.costMicros, 40_960 * PRICE.inputMicrosPerToken);
  });

  await t.test('400 inputs of 3072 floats, pretty-printed in full precision', async (t) => {
    const answer = embeddingsAnswer(Array.from({ length: 400 }, () => vector), 8000, 2);
    t.ok(Buffer.byteLength(answer) > MAX_UPSTREAM_JSON_BYTES, `the answer (${(Buffer.byteLength(answer) / MiB).toFixed(1)} MiB) is past the fixed 32 MiB`);
    node.answer(jsonText(answer));
    const { status, text, record } = await node.post('/v1/embeddings', { model: 'echo', input: inputs(400) });
    t.equal(status, 200);
    const body = JSON.parse(text) as { data: Array<{ embedding: number[] }> };
    t.equal(body.data.length, 400);
    t.same(body.data[399]!.embedding, vector);
    t.match(record, { status: 'ok', usage: { inputTokens: 8000, estimated: false } });
  });
});

t.test('an embeddings answer past its bound is refused, not retried, and charged the prompt estimate', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  // One input: its bound is 32 MiB, and this answer is a little more.
  const padding = 'A'.repeat(MAX_UPSTREAM_JSON_BYTES);
  node.answer(jsonText(embeddingsAnswer([padding], 12)));
  const { status, text, record } = await node.post('/v1/embeddings', { model: 'echo', input: 'y'.repeat(400) });
  t.equal(status, 502);
  t.match(JSON.parse(text), { error: { code: 'ZN_ERR_UPSTREAM_ERROR' } });
  t.notMatch(text, /AAAA/, 'nothing of the answer is quoted');
  t.equal(node.calls(), 1, 'not retried: the upstream did the work and was answered');
  t.match(record, { status: 'failed', httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_ERROR', upstreamModel: 'demo-echo' });
  t.ok(record.upstream, 'the record names the upstream that did the work');
  t.same(record.attempts.map((a) => [a.outcome, a.httpStatus]), [['error', 200]]);
  t.equal(record.usage.estimated, true, 'no usage was read: estimated');
  t.ok(record.usage.inputTokens >= 100, `the prompt estimate (${record.usage.inputTokens} tokens for 400 characters)`);
  t.equal(record.usage.outputTokens, 0);
  t.ok(record.cost.costMicros > 0, 'charged, not 0');
  t.equal(record.cost.costMicros, record.usage.inputTokens * PRICE.inputMicrosPerToken, 'the input at its price');
});
