// The prompt estimate the reservation is made from counts what the text list leaves out: the
// template's tokens around messages (message-frame-estimate.test.ts), chat tools, functions,
// response_format and media parts (image, file, audio, video); Anthropic tools and image/document blocks. A request with hundreds of KB of tool schemas reserves their input, not almost nothing,
// and is charged them against tokens per minute on admission too.
import t from 'tap';
import type { Test } from 'tap';
import {
  CHAT_MEDIA_PART_TOKENS,
  CONTENT_BLOCK_TOKENS,
  IMAGE_PART_TOKENS,
  MEDIA_PART_TOKENS,
  MESSAGE_FRAME_TOKENS,
  REPLY_PRIMING_TOKENS,
  VIDEO_PART_TOKENS,
  chatSectionTokens,
  messagesSectionTokens,
} from '../../../edge-node/src/billing/prompt-sections.js';
import { MEDIA_PART_TYPES } from '../../../edge-node/src/providers/openai/chat-content-parts.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { createNodeRateLimiter } from '../../../edge-node/src/rate-limit/create-node-rate-limiter.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { bundleKey } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import { pricedCreditNode } from './priced-credit-node.js';

/** About `chars` characters of tool definitions. */
function bigTools(chars: number): unknown[] {
  const tools: unknown[] = [];
  for (let i = 0; i * 1000 < chars; i += 1) {
    tools.push({ type: 'function', function: { name: `tool_${i}`, description: 'd'.repeat(900), parameters: { type: 'object', properties: {} } } });
  }
  return tools;
}

/** A node whose account holds `leaseMicros`, `echo` priced at 1 µ per input token and nothing for output. */
const creditNode = (t: Test, leaseMicros: number) => pricedCreditNode(t, leaseMicros, { inputMicrosPerToken: 1, outputMicrosPerToken: 0 });

t.test('a chat request with 200 KB of tool schemas reserves their input tokens and is refused when the lease cannot cover them', async (t) => {
  const { node, upstream } = await creditNode(t, 10_000);
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }], tools: bigTools(200_000) }),
  });
  t.equal(res.status, 402, '≈ 50 000 input tokens of tools do not fit in 10 000 µ at 1 µ per token');
  t.equal(((await res.json()) as { error: { code: string } }).error.code, 'ZN_ERR_CREDIT_EXHAUSTED');
  t.equal(upstream.requests.length, 0);
  const small = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }], tools: bigTools(1_000) }),
  });
  t.equal(small.status, 200, 'a few tools fit');
  await small.arrayBuffer();
});

t.test('the tokens/min charge on admission counts tool definitions and images, as the reservation does', async (t) => {
  const upstream = await startFakeUpstream(t);
  const limiter = await createNodeRateLimiter({ stateDir: undefined, logger: createLogger({ level: 'silent' }), env: {} });
  t.teardown(() => limiter.close());
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (_base, keyHash) => ({ apiKeys: [bundleKey('key-a', keyHash, { limits: { tokensPerMinute: 20_000 } })] }),
    services: { limiter },
  });
  const chat = (body: Record<string, unknown>): Promise<Response> =>
    fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
      body: JSON.stringify({ model: 'echo', max_tokens: 10, ...body }),
    });
  const remaining = async (res: Response): Promise<number> => {
    t.equal(res.status, 200);
    await res.arrayBuffer();
    return Number(res.headers.get('x-ratelimit-remaining-tokens'));
  };
  const image = { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } };
  const afterImages = await remaining(await chat({ messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }, image, image] }] }));
  const forImages = 20_000 - afterImages;
  t.ok(forImages >= 2 * IMAGE_PART_TOKENS + 10 && forImages < 2 * IMAGE_PART_TOKENS + 50, `charged ${forImages} tokens: two images, the text and max_tokens`);
  const afterTools = await remaining(await chat({ messages: [{ role: 'user', content: 'hi' }], tools: bigTools(60_000) }));
  t.ok(afterImages - afterTools >= 9_000, `charged ${afterImages - afterTools} tokens: ≈ 60 KB of tool definitions`);
  // (Each charge is trued up to the upstream's usage when its request ends: the headers show the
  // charge on admission, which is what concurrent requests are refused by.)
  t.equal(upstream.requests.length, 2);
});

t.test('ten video_url parts are refused like ten images when the lease cannot cover their allowance', async (t) => {
  // 10 000 µ at 1 µ per input token: ten parts of any media type the node accepts exceed it.
  // (Audio parts, audio_url too, are refused outright on a priced request: chat-audio-priced.test.ts.)
  for (const [type, payload] of [
    ['image_url', { image_url: { url: 'https://example.com/a.png' } }],
    ['video_url', { video_url: { url: 'https://example.com/ten-minutes.mp4' } }],
  ] as const) {
    const { node, upstream } = await creditNode(t, 10_000);
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
      body: JSON.stringify({ model: 'echo', max_tokens: 1, messages: [{ role: 'user', content: Array.from({ length: 10 }, () => ({ type, ...payload })) }] }),
    });
    t.equal(res.status, 402, `ten ${type} parts do not fit in 10 000 µ`);
    t.match(await res.json(), { error: { code: 'ZN_ERR_CREDIT_EXHAUSTED' } });
    t.equal(upstream.requests.length, 0, `nothing forwarded for ${type}`);
  }
});

t.test('every media part type the node accepts in chat content has an input allowance', async (t) => {
  const empty = chatSectionTokens({ messages: [{ role: 'user', content: [] }] });
  for (const type of MEDIA_PART_TYPES) {
    t.ok(CHAT_MEDIA_PART_TOKENS[type] > 0, `${type}: an allowance`);
    t.equal(chatSectionTokens({ messages: [{ role: 'user', content: [{ type, [type]: {} }] }] }) - empty, CHAT_MEDIA_PART_TOKENS[type], `${type}: counted per part`);
  }
  t.equal(CHAT_MEDIA_PART_TOKENS.video_url, VIDEO_PART_TOKENS);
  t.equal(CHAT_MEDIA_PART_TOKENS.audio_url, MEDIA_PART_TOKENS, 'an audio URL as much as base64 audio');
});

/** The template's tokens of a request of one message from `user` (one token): what every request adds besides its sections. */
const ONE_USER_MESSAGE = REPLY_PRIMING_TOKENS + MESSAGE_FRAME_TOKENS + 1;

t.test('chat tools, functions, response_format and image and file parts are counted', async (t) => {
  // Was 0 before the template's tokens were counted: priming and the message's frame and role now.
  t.equal(chatSectionTokens({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }), ONE_USER_MESSAGE, 'only the template beyond the text list');
  const tools = bigTools(40_000);
  t.ok(chatSectionTokens({ messages: [], tools }) >= 10_000, 'tools: their JSON length / 4');
  t.ok(chatSectionTokens({ messages: [], functions: [{ name: 'f', description: 'x'.repeat(4_000) }] }) >= 1_000);
  t.ok(chatSectionTokens({ messages: [], response_format: { type: 'json_schema', json_schema: { schema: { description: 'y'.repeat(4_000) } } } }) >= 1_000);
  const parts = [
    { type: 'text', text: 'look' },
    { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
    { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
    { type: 'file', file: { file_id: 'f1' } },
  ];
  t.equal(chatSectionTokens({ messages: [{ role: 'user', content: parts }] }), ONE_USER_MESSAGE + 2 * IMAGE_PART_TOKENS + MEDIA_PART_TOKENS);
});

t.test('Anthropic tools and image and document blocks are counted, text documents once (they are in the text list)', async (t) => {
  // Was 0 before the template's tokens were counted (as for chat above).
  t.equal(messagesSectionTokens({ model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] }), ONE_USER_MESSAGE);
  const tools = [{ name: 'search', description: 'z'.repeat(40_000), input_schema: { type: 'object' } }];
  t.ok(messagesSectionTokens({ messages: [], tools }) >= 10_000);
  const content = [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
    { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' } },
    { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'plain text' } },
    { type: 'tool_result', tool_use_id: 't1', content: [{ type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } }] },
  ];
  // Besides the media: markup for the four blocks and the image inside the tool result, and the result's tool_use_id ('t1': one token).
  const template = ONE_USER_MESSAGE + 5 * CONTENT_BLOCK_TOKENS + 1;
  t.equal(messagesSectionTokens({ messages: [{ role: 'user', content }] }), template + 2 * IMAGE_PART_TOKENS + MEDIA_PART_TOKENS);
});
