// An upstream error status that blames the caller's request (400, 404, 413, 422, …) reaches the
// caller with the upstream's own message, `param` and code (docs/errors.md ZN_ERR_UPSTREAM_ERROR):
// a developer sees why the request was refused (context length, a bad field) and an app can branch
// on `error.upstream_code`, while `code` stays ZN_ERR_UPSTREAM_ERROR. The message is bounded, one
// line, and has the node's key for the upstream and credential shapes redacted in the answer; the
// node's log line leaves the relayed message out (it may quote the caller's request). Statuses about the node's own key, account or rate limit (401, 403, 402, 429)
// and 5xx stay generic. Before, every such answer read `Upstream "demo" answered HTTP 400 (code).`
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import { startFakeAnthropicUpstream } from '../../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { anthropicSdkError } from '../anthropic-fixtures.js';
import { sdkError, startPipelineNode, withClaudeRoute } from '../pipeline/pipeline-harness.js';

type Teardown = Parameters<typeof startFakeUpstream>[0] & object;

/** The node's key for its upstream: no credential shape the guardrails know, so only the node's own redaction can hide it. */
const NODE_UPSTREAM_KEY = 'plainupstreamkeywordsforthisnode';

const CONTEXT_MESSAGE =
  "This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages.";
const contextLengthExceeded = {
  error: { message: CONTEXT_MESSAGE, type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' },
};

const ask = { model: 'echo', messages: [{ role: 'user' as const, content: 'hi' }] };

/** A node in front of a demo upstream that answers its next requests `status` with `body`, holding NODE_UPSTREAM_KEY for it. */
async function nodeAnswering(t: Teardown, status: number, body: unknown) {
  const upstream = await startFakeUpstream(t, { failNext: { count: 10, status, body } });
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base) => ({ upstreams: base.upstreams.map((u) => ({ ...u, apiKey: NODE_UPSTREAM_KEY })) }),
  });
  return { upstream, node };
}

/** The "upstream call failed" lines the node logged. */
function upstreamFailedLines(logs: Array<Record<string, unknown>>): Array<Record<string, unknown>> {
  return logs.filter((line) => line.msg === 'upstream call failed');
}

t.test("an upstream 400 context_length_exceeded reaches the OpenAI SDK with the upstream's message, param and code", async (t) => {
  const { node } = await nodeAnswering(t, 400, contextLengthExceeded);
  const err = await sdkError(node.client().chat.completions.create(ask));
  t.equal(err.status, 400);
  t.equal(err.code, 'ZN_ERR_UPSTREAM_ERROR', "the node's code is unchanged");
  t.equal(err.type, 'invalid_request_error');
  t.equal(err.param, 'messages', "the upstream's param");
  t.equal((err.error as { upstream_code?: unknown }).upstream_code, 'context_length_exceeded', "the upstream's code beside the node's");
  t.equal((err.error as { message?: unknown }).message, `Upstream "demo" answered HTTP 400 (context_length_exceeded): ${CONTEXT_MESSAGE}`);
  t.match(err.message, CONTEXT_MESSAGE, "the SDK's message carries the upstream's");
  const [line] = upstreamFailedLines(node.logs());
  t.match(line, { code: 'ZN_ERR_UPSTREAM_ERROR', reason: 'Upstream "demo" answered HTTP 400 (context_length_exceeded); its message was relayed to the caller and is not logged.' }, "the node's log line names the upstream's code, not its message nor param");
});

t.test("other caller-fault statuses (404, 413, 422) relay the upstream's message too", async (t) => {
  for (const status of [404, 413, 422]) {
    const { node } = await nodeAnswering(t, status, { error: { message: `the upstream's own words for ${status}`, type: 'invalid_request_error', param: 'model', code: null } });
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${node.secret}`, 'content-type': 'application/json' },
      body: JSON.stringify(ask),
    });
    t.equal(res.status, status);
    const body = (await res.json()) as { error: Record<string, unknown> };
    t.same(
      body.error,
      { message: `Upstream "demo" answered HTTP ${status} (invalid_request_error): the upstream's own words for ${status}`, type: 'invalid_request_error', param: 'model', code: 'ZN_ERR_UPSTREAM_ERROR', upstream_code: 'invalid_request_error' },
      `HTTP ${status}`,
    );
  }
});

t.test("the node's key for the upstream quoted in the message is redacted, whole, escaped or in part, as are credential shapes", async (t) => {
  const quoted = [
    `Incorrect API key provided: ${NODE_UPSTREAM_KEY}.`,
    `Header was ${NODE_UPSTREAM_KEY.slice(0, 20)}`,
    `Tail ${NODE_UPSTREAM_KEY.slice(-20)} seen`,
    `another credential sk-proj-abcdefghijklmnopqrstuvwx0123 in it`,
  ].join(' | ');
  const { node } = await nodeAnswering(t, 400, { error: { message: quoted, type: 'invalid_request_error', param: null, code: 'invalid_value' } });
  const err = await sdkError(node.client().chat.completions.create(ask));
  t.equal(err.status, 400);
  const message = String((err.error as { message?: unknown }).message);
  t.match(message, 'Incorrect API key provided: [redacted].', 'the message is relayed with the key redacted');
  t.match(message, 'another credential [redacted] in it', 'a credential shape is redacted');
  const everything = `${JSON.stringify(err.error)}\n${node.logText()}`;
  for (let at = 0; at + 16 <= NODE_UPSTREAM_KEY.length; at += 1) {
    t.notOk(everything.includes(NODE_UPSTREAM_KEY.slice(at, at + 16)), `no half of the key (from ${at}) in the answer or the log`);
  }
  t.notOk(everything.includes('sk-proj-abcdefghijklmnopqrstuvwx0123'), 'nor the credential');
  t.match(upstreamFailedLines(node.logs())[0], { reason: 'Upstream "demo" answered HTTP 400 (invalid_value); its message was relayed to the caller and is not logged.' }, "the log line leaves the upstream's message out");
});

t.test("the node's key escaped letter by letter leaves the message generic", async (t) => {
  const escaped = NODE_UPSTREAM_KEY.replace(/[aeiou]/g, (c) => `\\u00${c.charCodeAt(0).toString(16)}`);
  const { node } = await nodeAnswering(t, 400, { error: { message: `key ${escaped}`, type: 'invalid_request_error', code: 'bad_key_echo' } });
  const err = await sdkError(node.client().chat.completions.create(ask));
  t.equal((err.error as { message?: unknown }).message, 'Upstream "demo" answered HTTP 400 (bad_key_echo).');
});

t.test('an over-long message is cut, and control characters are written as spaces', async (t) => {
  const long = `start\u0000\u001b\r\nnext\u202eline ${'x'.repeat(5000)} end`;
  const { node } = await nodeAnswering(t, 400, { error: { message: long, type: 'invalid_request_error', param: 'messages\u0000', code: 'string_above_max_length' } });
  const err = await sdkError(node.client().chat.completions.create(ask));
  const message = String((err.error as { message?: unknown }).message);
  const relayed = message.slice('Upstream "demo" answered HTTP 400 (string_above_max_length): '.length);
  t.ok(message.startsWith('Upstream "demo" answered HTTP 400 (string_above_max_length): start next line xxx'), message.slice(0, 120));
  t.equal(relayed.length, 1000, 'at most 1000 characters of the upstream message');
  t.ok(relayed.endsWith('…'), 'marked as cut');
  t.notOk(message.includes(' end'), "the rest is not relayed");
  t.equal(err.param, null, 'a param that is no field path is not relayed');
});

t.test("401, 403, 402, 429 and 5xx stay generic: the upstream's message, param and code concern the node's own account", async (t) => {
  const secretive = (code: string) => ({ error: { message: 'Your organization org-123 has been disabled; contact sales.', type: 'invalid_request_error', param: 'organization', code } });
  for (const [status, expected] of [
    [401, 502],
    [403, 502],
    [402, 502],
    [429, 429],
    [500, 502],
    [503, 502],
  ] as const) {
    const { node } = await nodeAnswering(t, status, secretive('account_disabled'));
    const err = await sdkError(node.client().chat.completions.create(ask));
    t.equal(err.status, expected, `HTTP ${status}`);
    const error = err.error as Record<string, unknown>;
    t.notOk(String(error.message).includes('org-123'), `HTTP ${status}: the upstream's message is not relayed`);
    t.equal(error.param, null, `HTTP ${status}: no param`);
    t.notOk('upstream_code' in error, `HTTP ${status}: no upstream_code`);
  }
});

t.test("a 400 whose body is not the error shape keeps today's generic message", async (t) => {
  for (const body of ['plain text, not JSON', { error: 'a string' }, { message: 'top-level message' }, { error: { message: 42 } }]) {
    const { node } = await nodeAnswering(t, 400, body);
    const err = await sdkError(node.client().chat.completions.create(ask));
    t.equal(err.status, 400);
    t.equal((err.error as { message?: unknown }).message, 'Upstream "demo" answered HTTP 400.', JSON.stringify(body));
    t.equal(err.param, null);
  }
});

t.test("on /v1/messages the Anthropic SDK sees the upstream's message, its key redacted", async (t) => {
  const anthropic = await startFakeAnthropicUpstream(t, {
    failNext: {
      count: 1,
      status: 400,
      body: { type: 'error', error: { type: 'invalid_request_error', message: 'prompt is too long: 210000 tokens > 200000 maximum (key sk-ant-upstream-0123456789)' } },
    },
  });
  const node = await startPipelineNode(t, { upstreamUrl: 'http://127.0.0.1:9/v1', bundle: (base) => withClaudeRoute(base, anthropic.url) });
  const client = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
  const err = await anthropicSdkError(client.messages.create({ model: 'claude', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }));
  t.equal(err.status, 400);
  const error = (err.error as { error?: Record<string, unknown> }).error ?? {};
  t.equal(error.type, 'invalid_request_error');
  t.equal(error.code, 'ZN_ERR_UPSTREAM_ERROR');
  t.equal(error.upstream_code, 'invalid_request_error');
  t.equal(error.message, 'Upstream "claude" answered HTTP 400 (invalid_request_error): prompt is too long: 210000 tokens > 200000 maximum (key [redacted])');
});
