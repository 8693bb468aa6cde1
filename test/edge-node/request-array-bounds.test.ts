// Request validation runs before the key is checked, so what it costs any caller can make the node
// pay. Caller arrays are bounded and checked up to their first bad element: a body well under the
// size limit with a million bad elements once built one zod issue per element and held the event
// loop for seconds (embeddings' union over token ids, chat's messages, Anthropic's blocks).
import t from 'tap';
import { z } from 'zod';
import { cappedArray } from '../../edge-node/src/providers/capped-array.js';
import { MAX_EMBEDDING_INPUTS, MAX_EMBEDDING_TOKEN_IDS } from '../../edge-node/src/providers/openai/embeddings-input.js';
import { MAX_CHAT_MESSAGES } from '../../edge-node/src/providers/openai/chat-request.js';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { startPipelineNode, withClaudeRoute } from './pipeline/pipeline-harness.js';

/** A string schema that counts the elements it was asked to check. */
function countingElement(): { schema: z.ZodType<string>; checked: () => number } {
  let checked = 0;
  const schema = z.string().refine((value) => {
    checked += 1;
    return value !== 'bad';
  }, 'is bad');
  return { schema, checked: () => checked };
}

t.test('an array over its cap is refused before any of its elements is checked', async (t) => {
  const element = countingElement();
  const result = cappedArray(element.schema, { max: 10 }).safeParse(Array.from({ length: 100_000 }, () => 'bad'));
  t.equal(result.success, false);
  t.match(result.error?.issues, [{ code: 'too_big', path: [] }]);
  t.equal(result.error?.issues.length, 1);
  t.equal(element.checked(), 0, 'no element was checked');
});

t.test('elements are checked up to the first bad one, which alone is reported, at its index', async (t) => {
  const element = countingElement();
  const items = Array.from({ length: 1000 }, (_, i) => (i >= 5 ? 'bad' : 'good'));
  const result = cappedArray(element.schema, { max: 1000 }).safeParse(items);
  t.same(result.error?.issues.map((issue) => [issue.path, issue.message]), [[[5], 'is bad']]);
  t.equal(element.checked(), 6, 'the walk stopped at the first bad element');
  t.equal(cappedArray(element.schema, { min: 1, max: 10 }).safeParse([]).success, false, 'the lower bound holds too');
});

t.test('a valid array gives its elements as parsed, fresh objects as z.array does', async (t) => {
  const input = [{ role: 'user', extra: 1 }];
  const result = cappedArray(z.looseObject({ role: z.string() }), { max: 10 }).parse(input);
  t.same(result, input);
  t.not(result[0], input[0], 'a copy, so what is forwarded is not the body as received');
});

t.test('bodies of many bad elements, sent without a key, are refused at once with the first problem', async (t) => {
  const openAi = await startFakeUpstream(t);
  const anthropic = await startFakeAnthropicUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: openAi.url,
    bundle: (base) => withClaudeRoute(base, anthropic.url),
  });
  // The longest the event loop went without running a 10 ms timer: a broken node held it for
  // seconds per request (5 s to 22 s on a 2-core machine), a fixed one for a few tens of ms.
  let worstGap = 0;
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    worstGap = Math.max(worstGap, now - last);
    last = now;
  }, 10);
  t.teardown(() => clearInterval(timer));
  const post = async (path: string, body: unknown, key?: string) => {
    const text = JSON.stringify(body);
    // The test's own work making the body is not the node's.
    last = performance.now();
    const res = await fetch(`${node.origin}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key !== undefined ? { authorization: `Bearer ${key}` } : {}) },
      body: text,
    });
    const json = (await res.json()) as { error?: { code?: string; message?: string; param?: string | null } };
    return { status: res.status, code: json.error?.code, param: json.error?.param, message: json.error?.message };
  };
  const ids = (count: number) => Array.from({ length: count }, (_, i) => i % 10);

  t.test('embeddings: the input is bounded as OpenAI bounds it, and checked by the kind of its first element', async (t) => {
    t.match(await post('/v1/embeddings', { model: 'echo', input: ids(1_000_000) }), { status: 400, code: 'ZN_ERR_INVALID_REQUEST', param: 'input', message: new RegExp(`more token ids than the ${MAX_EMBEDDING_TOKEN_IDS}`) }, 'a million token ids');
    t.match(await post('/v1/embeddings', { model: 'echo', input: [...ids(1_000_000), 'x'] }), { status: 400, param: 'input' }, 'a million token ids and a string');
    t.match(await post('/v1/embeddings', { model: 'echo', input: Array.from({ length: 500 }, () => ids(1000)) }), { status: 400, param: 'input', message: /more token ids than/ }, 'token ids over many inputs count in all');
    t.match(await post('/v1/embeddings', { model: 'echo', input: Array.from({ length: MAX_EMBEDDING_INPUTS + 1 }, () => 'a') }), { status: 400, param: 'input', message: new RegExp(`at most ${MAX_EMBEDDING_INPUTS} per request`) }, 'more inputs than OpenAI takes');
    t.match(await post('/v1/embeddings', { model: 'echo', input: [...ids(1000), 'x', 'y'] }), { status: 400, param: 'input[1000]', message: /^Invalid request: input\[1000\]: must be a token id/ });
    t.match(await post('/v1/embeddings', { model: 'echo', input: ['a', 'b', 3] }), { status: 400, param: 'input[2]', message: /must be a string, as input\[0\] is/ });
    t.match(await post('/v1/embeddings', { model: 'echo', input: [[1, 2], [3, 'x']] }), { status: 400, param: 'input[1][1]' });
    // A negative id is no token: refused, not forwarded for the upstream to fail or wrap.
    t.match(await post('/v1/embeddings', { model: 'echo', input: [5, -1] }), { status: 400, param: 'input[1]', message: /must be a token id \(a whole number from 0\)/ });
    t.match(await post('/v1/embeddings', { model: 'echo', input: [[1], [-3]] }), { status: 400, param: 'input[1][0]' });
    t.match(await post('/v1/embeddings', { model: 'echo', input: [-1] }), { status: 400, param: 'input[0]' });
    t.match(await post('/v1/embeddings', { model: 'echo', input: [[1], []] }), { status: 400, param: 'input[1]', message: /empty/ });
    t.match(await post('/v1/embeddings', { model: 'echo', input: [{}] }), { status: 400, param: 'input[0]' });
    t.match(await post('/v1/embeddings', { model: 'echo', input: '' }), { status: 400, code: 'ZN_ERR_INVALID_REQUEST', param: 'input', message: /must not be an empty string/ }, 'an empty text: nothing to embed');
    t.match(await post('/v1/embeddings', { model: 'echo', input: [''] }), { status: 400, param: 'input[0]', message: /must not be an empty string/ });
    t.match(await post('/v1/embeddings', { model: 'echo', input: ['a', ''] }), { status: 400, param: 'input[1]', message: /must not be an empty string/ });
    t.match(await post('/v1/embeddings', { model: 'echo' }), { status: 400, param: 'input' }, 'an input is required');
  });

  t.test('embeddings: every accepted shape, up to the bounds, passes the checks', async (t) => {
    for (const input of ['one text', ['a', 'b'], ids(MAX_EMBEDDING_TOKEN_IDS), [ids(3), ids(2)], Array.from({ length: MAX_EMBEDDING_INPUTS }, () => 'a')]) {
      t.match(await post('/v1/embeddings', { model: 'echo', input }), { status: 401 }, 'on to the key check');
    }
    // The fake upstream checks token ids with the slow union this node no longer uses: small ones.
    for (const input of ['one text', ['a', 'b'], ids(3), [ids(3), ids(2)]]) {
      t.match(await post('/v1/embeddings', { model: 'echo', input }, node.secret), { status: 200 }, 'and served with a key');
    }
    t.same(openAi.requests.at(-1)?.body, { model: 'demo-echo', input: [ids(3), ids(2)] }, 'forwarded as sent');
  });

  t.test('chat: messages are bounded, and only the first bad one is reported', async (t) => {
    t.match(
      await post('/v1/chat/completions', { model: 'echo', messages: Array.from({ length: 250_000 }, () => ({ role: '' })) }),
      { status: 400, code: 'ZN_ERR_INVALID_REQUEST', param: 'messages', message: new RegExp(`<=${MAX_CHAT_MESSAGES} items`) },
    );
    const bad = await post('/v1/chat/completions', { model: 'echo', messages: Array.from({ length: MAX_CHAT_MESSAGES }, () => ({ role: '' })) });
    t.match(bad, { status: 400, param: 'messages[0].role' });
    t.notMatch(bad.message, /more\)/, 'one problem, not one per message');
  });

  t.test('messages: blocks in many messages stop at the first bad one', async (t) => {
    const blocks = Array.from({ length: 10_000 }, () => ({ type: '' }));
    const res = await post('/v1/messages', { model: 'claude', max_tokens: 5, messages: Array.from({ length: 30 }, () => ({ role: 'user', content: blocks })) });
    // Anthropic's error shape has no `param`: the message names the field.
    t.match(res, { status: 400, code: 'ZN_ERR_INVALID_REQUEST', message: /^Invalid request: messages\[0\]\.content: / });
    t.notMatch(res.message, /more\)/, 'one problem, not one per message');
    t.match(await post('/v1/messages', { model: 'claude', max_tokens: 5, messages: [{ role: 'user', content: Array.from({ length: 250_000 }, () => ({ type: '' })) }] }), { status: 400, message: /^Invalid request: messages\[0\]\.content: / }, 'blocks over the cap');
  });

  t.test('none of these held the event loop', async (t) => {
    // Far above the fixed figure and far below the broken one.
    t.ok(worstGap < 3000, `the event loop was never held for 3 s (longest: ${Math.round(worstGap)} ms)`);
  });
});
