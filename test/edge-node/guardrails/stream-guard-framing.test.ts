// Output guardrails over real OpenAI-style streams (the node's chat provider, a scripted upstream):
// parallel choices (n > 1) each keep their own text, no delta splits a surrogate pair, and held
// text arrives no later than the chunk carrying its choice's finish_reason.
import http from 'node:http';
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { bundleKey } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';
import { policy } from './guardrail-fixtures.js';
import { listenForTest } from '../../fixtures/loopback-server.js';

interface Choice {
  index: number;
  delta: { content?: string };
  finish_reason: string | null;
}

const chunk = (index: number, content: string | null, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index, delta: content === null ? {} : { content }, finish_reason: finish }] })}\n\n`;

/** An upstream that answers every request with these SSE events, then [DONE]. */
async function scriptedUpstream(t: { teardown(fn: () => unknown): void }, events: string[]): Promise<string> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const e of events) res.write(e);
      res.end('data: [DONE]\n\n');
    });
  });
  return listenForTest(t, server);
}

async function guardedNode(t: { teardown(fn: () => unknown): void }, upstreamUrl: string, rules: GuardrailRule[]): Promise<PipelineNode> {
  return startPipelineNode(t, {
    upstreamUrl,
    bundle: (_base, hash) => ({
      apiKeys: [bundleKey('key-a', hash, { guardrailPolicyId: 'p' })],
      guardrailPolicies: [policy('p', rules)],
    }),
  });
}

/** The stream's chunks (raw data lines, not decoded by an SDK) in order. */
async function streamChunks(node: PipelineNode, extra: Record<string, unknown> = {}): Promise<{ raw: string[]; choices: Choice[] }> {
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'hi' }], ...extra }),
  });
  const text = await res.text();
  const raw = text.split('\n\n').filter((e) => e.startsWith('data: {')).map((e) => e.slice('data: '.length));
  const choices = raw.flatMap((data) => (JSON.parse(data) as { choices: Choice[] }).choices);
  return { raw, choices };
}

const MASK_EMAIL: GuardrailRule[] = [{ detector: 'email', action: 'mask', on: 'output' }];

t.test('with n > 1, each streamed choice keeps its own text and its own masking', async (t) => {
  const A = 'Alpha choice says hello world. '.repeat(12) + 'mail a@example.com ' + 'alpha '.repeat(30);
  const B = 'Bravo choice answers differently. '.repeat(12) + 'mail b@example.org ' + 'bravo '.repeat(30);
  const events: string[] = [];
  for (let i = 0; i < Math.max(A.length, B.length); i += 23) {
    if (i < A.length) events.push(chunk(0, A.slice(i, i + 23)));
    if (i < B.length) events.push(chunk(1, B.slice(i, i + 23)));
  }
  events.push(chunk(0, null, 'stop'), chunk(1, null, 'stop'));
  const node = await guardedNode(t, await scriptedUpstream(t, events), MASK_EMAIL);
  const { choices } = await streamChunks(node, { n: 2 });
  const textOf = (index: number): string => choices.filter((c) => c.index === index).map((c) => c.delta.content ?? '').join('');
  t.equal(textOf(0), A.replace('a@example.com', '[EMAIL]'), 'choice 0 is its own text, masked');
  t.equal(textOf(1), B.replace('b@example.org', '[EMAIL]'), 'choice 1 is its own text, masked');
  for (const index of [0, 1]) {
    const own = choices.filter((c) => c.index === index);
    t.equal(own.findIndex((c) => c.finish_reason !== null), own.length - 1, `choice ${index}: finish_reason comes after all its text`);
  }
});

t.test('no streamed delta ends or starts with half of a surrogate pair', async (t) => {
  const points = [...'你好😀世界🎉!'.repeat(60)];
  const events: string[] = [];
  for (let i = 0; i < points.length; i += 5) events.push(chunk(0, points.slice(i, i + 5).join('')));
  events.push(chunk(0, null, 'stop'));
  const node = await guardedNode(t, await scriptedUpstream(t, events), MASK_EMAIL);
  const { raw, choices } = await streamChunks(node);
  t.equal(choices.map((c) => c.delta.content ?? '').join(''), points.join(''), 'the text is whole');
  const lone = raw.filter((data) => /\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f])|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}/i.test(data));
  t.same(lone, [], 'no chunk carries an escaped lone surrogate');
  for (const c of choices) {
    const s = c.delta.content ?? '';
    t.notMatch(s, /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/, `well-formed delta ${JSON.stringify(s.slice(0, 12))}`);
  }
});

t.test('held text arrives in the chunk carrying finish_reason, not after it', async (t) => {
  const node = await guardedNode(t, await scriptedUpstream(t, [chunk(0, 'The answer is '), chunk(0, 'forty-two, ask x@example.com.', 'stop')]), MASK_EMAIL);
  const { choices } = await streamChunks(node);
  let upToFinish = '';
  for (const c of choices) {
    upToFinish += c.delta.content ?? '';
    if (c.finish_reason !== null) break;
  }
  t.equal(upToFinish, 'The answer is forty-two, ask [EMAIL].', 'all content comes no later than the finish_reason chunk');
  t.equal(choices.at(-1)?.finish_reason, 'stop', 'nothing follows the finish chunk');
});

t.test('with n > 1, a chunk finishing one choice releases that choice only; a match the other choice has split across it is still masked', async (t) => {
  const node = await guardedNode(t, await scriptedUpstream(t, [
    chunk(0, 'first choice, short'), chunk(1, 'second choice goes on to y@exa'), chunk(0, null, 'stop'), chunk(1, 'mple.com', 'stop'),
  ]), MASK_EMAIL);
  const { choices } = await streamChunks(node, { n: 2 });
  const upToFinish = (index: number): string => {
    let text = '';
    for (const c of choices.filter((x) => x.index === index)) {
      text += c.delta.content ?? '';
      if (c.finish_reason !== null) return text;
    }
    return `${text} (no finish)`;
  };
  t.equal(upToFinish(0), 'first choice, short');
  t.equal(upToFinish(1), 'second choice goes on to [EMAIL]');
});

t.test('with n > 1, a chunk with no text and no finish_reason ends no choice: a match split across one is still masked', async (t) => {
  const raw = (choices: unknown[], extra: Record<string, unknown> = {}): string =>
    `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices, ...extra })}\n\n`;
  // Each kind of text-less chunk an upstream sends mid-answer, between the halves of a keyword.
  const textLess = {
    'an empty delta': raw([{ index: 0, delta: {}, finish_reason: null }]),
    "the other choice's role-only delta": raw([{ index: 1, delta: { role: 'assistant' }, finish_reason: null }]),
    "the other choice's tool_calls delta": raw([
      { index: 1, delta: { tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }] }, finish_reason: null },
    ]),
    'a content-filter note': raw([{ index: 0, delta: {}, finish_reason: null, content_filter_results: { hate: { filtered: false, severity: 'safe' } } }]),
  };
  const events: string[] = [chunk(1, 'the other choice.')];
  let expected = '';
  for (const between of Object.values(textLess)) {
    events.push(chunk(0, 'codename project-au'), between, chunk(0, 'rora; '));
    expected += 'codename [REDACTED]; ';
  }
  events.push(chunk(0, null, 'stop'), chunk(1, null, 'stop'));
  const node = await guardedNode(t, await scriptedUpstream(t, events), [{ detector: 'keywords', keywords: ['project-aurora'], action: 'mask', on: 'output' }]);
  const { choices } = await streamChunks(node, { n: 2 });
  const textOf = (index: number): string => choices.filter((c) => c.index === index).map((c) => c.delta.content ?? '').join('');
  t.equal(textOf(0), expected, `every split keyword is masked (${Object.keys(textLess).join(', ')})`);
  t.equal(textOf(1), 'the other choice.');
  const zero = choices.filter((c) => c.index === 0);
  t.equal(zero.findIndex((c) => c.finish_reason !== null), zero.length - 1, 'choice 0 finishes after all its text');
});
