// What the node refuses about a request body before anything is forwarded, each with a code that
// names the problem: nesting deeper than MAX_BODY_DEPTH (not a 500 from a stack overflow), a
// Content-Encoding (compressed bodies are not decoded), a charset other than UTF-8 (refused, not
// misread), and `__proto__` / `constructor.prototype` keys (refused by the JSON parser, named as
// such rather than called invalid JSON).
import { gzipSync } from 'node:zlib';
import t from 'tap';
import { MAX_BODY_DEPTH, nestsDeeperThan } from '../../edge-node/src/pipeline/stages/identify.js';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';

/** A JSON array nested `levels` deep: `[[…]]`. */
const nested = (levels: number): string => '['.repeat(levels) + ']'.repeat(levels);

t.test('the nesting check counts objects and arrays, and walks any depth without recursion', async (t) => {
  t.equal(nestsDeeperThan('text', 1), false);
  t.equal(nestsDeeperThan({ a: [{ b: 1 }] }, 3), false);
  t.equal(nestsDeeperThan({ a: [{ b: {} }] }, 3), true);
  t.equal(nestsDeeperThan(JSON.parse(nested(100_000)), MAX_BODY_DEPTH), true);
});

t.test('request bodies the node refuses before forwarding', async (t) => {
  const openAi = await startFakeUpstream(t);
  const anthropic = await startFakeAnthropicUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: openAi.url,
    bundle: (base) => ({
      upstreams: [...base.upstreams, { id: 'up-claude', name: 'claude', kind: 'anthropic', baseUrl: anthropic.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 30_000 }],
      routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 }],
    }),
  });
  const post = async (path: string, body: string | Buffer, headers: Record<string, string> = {}) => {
    const res = await fetch(`${node.origin}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}`, ...headers },
      body,
    });
    const json = (await res.json()) as { error?: { code: string; message: string } };
    return { status: res.status, code: json.error?.code, message: json.error?.message };
  };
  const chat = (extra: string) => `{"model":"echo","messages":[{"role":"user","content":"hi"}]${extra}}`;
  const messages = (extra: string) => `{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"hi"}]${extra}}`;
  const forwarded = () => openAi.requests.length + anthropic.requests.length;

  t.test('a deeply nested body is a 400 naming the nesting, not a 500, and logs no error', async (t) => {
    const before = forwarded();
    for (const [path, body] of [
      ['/v1/chat/completions', chat(`,"x":${nested(10_000)}`)],
      ['/v1/messages', messages(`,"metadata":${nested(100_000)}`)],
      ['/v1/embeddings', `{"model":"echo","input":${nested(MAX_BODY_DEPTH)}}`],
    ] as const) {
      t.match(await post(path, body), { status: 400, code: 'ZN_ERR_BODY_TOO_DEEP', message: new RegExp(`deeper than ${MAX_BODY_DEPTH} levels`) }, path);
    }
    t.equal(forwarded(), before, 'nothing was forwarded');
    t.notOk(
      node.logs().some((line) => (line.level as number) >= 50),
      'no error-level log line',
    );
  });

  t.test('a body nested exactly to the limit is served', async (t) => {
    // The body object is level 1, so the array adds MAX_BODY_DEPTH - 1 levels.
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
      body: chat(`,"x":${nested(MAX_BODY_DEPTH - 1)}`),
    });
    t.equal(res.status, 200);
  });

  t.test('a compressed body gets 415 ZN_ERR_UNSUPPORTED_ENCODING, not "not valid JSON"; identity is fine', async (t) => {
    const before = forwarded();
    t.match(await post('/v1/chat/completions', gzipSync(chat('')), { 'content-encoding': 'gzip' }), { status: 415, code: 'ZN_ERR_UNSUPPORTED_ENCODING', message: /gzip/ });
    t.match(await post('/v1/chat/completions', chat(''), { 'content-encoding': 'br' }), { status: 415, code: 'ZN_ERR_UNSUPPORTED_ENCODING' }, 'also when the body is not in fact compressed');
    t.equal(forwarded(), before, 'nothing was forwarded');
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'identity', authorization: `Bearer ${node.secret}` },
      body: chat(''),
    });
    t.equal(res.status, 200);
  });

  t.test('a JSON body declared in a charset other than UTF-8 gets 415 ZN_ERR_UNSUPPORTED_CHARSET on both APIs; UTF-8 in any spelling and no charset are served', async (t) => {
    const before = forwarded();
    const utf16 = (text: string) => Buffer.from(text, 'utf16le');
    t.match(await post('/v1/chat/completions', utf16(chat('')), { 'content-type': 'application/json; charset=utf-16le' }), { status: 415, code: 'ZN_ERR_UNSUPPORTED_CHARSET', message: /"utf-16le"/ });
    t.match(await post('/v1/chat/completions', chat(''), { 'content-type': 'application/json;charset="UTF-16"' }), { status: 415, code: 'ZN_ERR_UNSUPPORTED_CHARSET', message: /"utf-16"/ }, 'quoted, upper case, also when the bytes happen to be ASCII');
    t.match(await post('/v1/chat/completions', chat(''), { 'content-type': 'application/json; charset=iso-8859-1' }), { status: 415, code: 'ZN_ERR_UNSUPPORTED_CHARSET' });
    const res = await fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json; charset=utf-16', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
      body: utf16(messages('')),
    });
    t.equal(res.status, 415);
    t.ok(res.headers.get('request-id'), "Anthropic's request-id header");
    t.match(await res.json(), { type: 'error', error: { type: 'invalid_request_error', code: 'ZN_ERR_UNSUPPORTED_CHARSET', details: { error_code: 'ZN_ERR_UNSUPPORTED_CHARSET' }, message: /"utf-16"/ } }, "in Anthropic's error shape");
    t.equal(forwarded(), before, 'nothing was forwarded');
    for (const contentType of ['application/json', 'application/json; charset=utf-8', 'application/json; charset=UTF-8', 'application/json; charset="utf-8"', 'application/json; charset=us-ascii']) {
      t.match(await post('/v1/chat/completions', chat(''), { 'content-type': contentType }), { status: 200 }, contentType);
    }
    t.match(await post('/v1/messages', messages(''), { 'content-type': 'application/json; charset=UTF-8' }), { status: 200 }, 'and on /v1/messages');
  });

  t.test('a __proto__ or constructor.prototype key is refused with a message naming it; broken JSON is still invalid JSON', async (t) => {
    for (const extra of [',"__proto__":{"admin":true}', ',"metadata":{"constructor":{"prototype":{"admin":true}}}']) {
      t.match(await post('/v1/chat/completions', chat(extra)), { status: 400, code: 'ZN_ERR_INVALID_REQUEST', message: /"__proto__" or "constructor\.prototype" key/ }, extra);
    }
    t.match(await post('/v1/messages', messages(',"__proto__":{}')), { status: 400, code: 'ZN_ERR_INVALID_REQUEST', message: /__proto__/ });
    t.match(await post('/v1/chat/completions', '{"model":'), { status: 400, code: 'ZN_ERR_INVALID_JSON' });
    t.match(await post('/v1/chat/completions', `\ufeff${chat('')}`), { status: 200 }, 'a UTF-8 BOM is still accepted');
  });
});
