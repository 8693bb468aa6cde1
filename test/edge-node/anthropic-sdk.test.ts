// POST /v1/messages driven by the official @anthropic-ai/sdk against a listening node serving a
// signed-bundle config, with fake Anthropic upstreams: answers and streams under the alias, usage
// in the request record, the upstream secret as x-api-key only, typed SDK errors carrying our code,
// the wrong API family both ways, fallback on 5xx and timeouts, and streams that break.
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import type { RequestRecord } from '../../proto/src/index.js';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { estimateTokens } from '../../edge-node/src/providers/token-estimate.js';
import { TargetHealth } from '../../edge-node/src/routing/target-health.js';
import { FAKE_ANTHROPIC_PREFIX, fakeTokenCount, startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { UPSTREAM_SECRET, bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { anthropicSdkError as sdkError, type AnthropicSdkError as SdkError, recordsInto } from './anthropic-fixtures.js';

const ANTHROPIC_SECRET = 'sk-ant-upstream-secret-never-shown-0123456789';
const REQUEST_ID = /^req_[0-9A-HJKMNP-TV-Z]{26}$/;


/** Our code as the SDK exposes it (details.error_code) and as the body carries it (error.code). */
function codesOf(err: SdkError): [string | null, unknown] {
  const body: unknown = err.error;
  return [err.errorCode, (body as { error?: { code?: unknown } } | undefined)?.error?.code];
}

t.test('the Anthropic Messages surface', async (t) => {
  const primary = await startFakeAnthropicUpstream(t);
  const backup = await startFakeAnthropicUpstream(t);
  const openAiUpstream = await startFakeUpstream(t);
  const caller = newCallerKey();
  const restricted = newCallerKey();
  const guarded = newCallerKey();
  const bundle = testBundle({
    nodeId: 'node-anthropic',
    version: 3,
    upstreamUrl: openAiUpstream.url,
    keys: [
      bundleKey('key-1', caller.sha256),
      bundleKey('key-echo-only', restricted.sha256, { allowedModels: ['echo', 'claude-nope'] }),
      bundleKey('key-guarded', guarded.sha256, { guardrailPolicyId: 'policy-1' }),
    ],
    guardrailPolicies: [
      {
        id: 'policy-1',
        name: 'mask and block',
        rules: [
          { detector: 'email', action: 'mask', on: 'input' },
          { detector: 'keywords', keywords: ['banana'], action: 'mask', on: 'output' },
          { detector: 'keywords', keywords: ['forbidden'], action: 'block', on: 'input' },
        ],
      },
    ],
    upstreams: [
      { id: 'up-1', name: 'demo', kind: 'openai-compatible', baseUrl: openAiUpstream.url, apiKey: UPSTREAM_SECRET, timeoutMs: 30_000 },
      { id: 'up-2', name: 'claude-primary', kind: 'anthropic', baseUrl: primary.url, apiKey: ANTHROPIC_SECRET, timeoutMs: 30_000 },
      { id: 'up-3', name: 'claude-backup', kind: 'anthropic', baseUrl: backup.url, apiKey: ANTHROPIC_SECRET, timeoutMs: 30_000 },
      // The primary again, with a short timeout of its own (the fallback keeps its long one).
      { id: 'up-4', name: 'claude-impatient', kind: 'anthropic', baseUrl: primary.url, apiKey: ANTHROPIC_SECRET, timeoutMs: 300 },
    ],
    routes: [
      { alias: 'echo', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 },
      {
        alias: 'claude',
        targets: [{ upstream: 'claude-primary', model: 'claude-real-1', weight: 1 }],
        fallbacks: [{ upstream: 'claude-backup', model: 'claude-real-2' }],
        timeoutMs: 30_000,
        retries: 0,
      },
      {
        alias: 'claude-quick',
        targets: [{ upstream: 'claude-impatient', model: 'claude-real-1', weight: 1 }],
        fallbacks: [{ upstream: 'claude-backup', model: 'claude-real-2' }],
        timeoutMs: 30_000,
        retries: 0,
      },
    ],
  });

  const records: RequestRecord[] = [];
  const spool = recordsInto(records);
  const logLines: string[] = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void logLines.push(line) } });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger, services: {
      nodeId: 'node-anthropic',
      spool,
      // The tests below run one after another on this node, and several fail the primary on purpose
      // (streams cut or errored midway count against a target): none may eject it for the next test.
      // Ejection has its own tests (pipeline/routing.test.ts, openai-stream-failures.test.ts).
      targetHealth: new TargetHealth({ failureThreshold: Number.MAX_SAFE_INTEGER }),
    },
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(async () => {
    const closing = app.close();
    // Every request is done by now; a client socket opened but never used would otherwise hold
    // close() until the server's headers timeout.
    app.server.closeAllConnections();
    await closing;
  });
  const origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  // No SDK retries: each call is exactly one request to the node. The SDK appends /v1/messages.
  const client = (apiKey = caller.secret): Anthropic => new Anthropic({ baseURL: origin, apiKey, maxRetries: 0, timeout: 20_000 });
  const recordOf = (requestId: string | null | undefined): Promise<RequestRecord> =>
    waitFor(() => records.find((r) => r.requestId === requestId), { what: `the record of ${String(requestId)}` });

  t.test('a message comes back under the alias with usage, and the record has what the upstream counted', async (t) => {
    const before = primary.requests.length;
    const { data, response } = await client()
      .messages.create({ model: 'claude', max_tokens: 256, system: 'be brief', messages: [{ role: 'user', content: 'hello claude' }] })
      .withResponse();
    const text = `${FAKE_ANTHROPIC_PREFIX}hello claude`;
    t.equal(response.status, 200);
    t.same(data.content, [{ type: 'text', text }]);
    t.equal(data.model, 'claude', 'the caller sees its alias, not the upstream model');
    t.equal(data.usage.output_tokens, fakeTokenCount(text));
    const requestId = response.headers.get('x-request-id');
    t.match(requestId, REQUEST_ID);
    t.equal(response.headers.get('request-id'), requestId, "the SDK's request-id header is the node's request id");

    const forwarded = primary.requests.slice(before);
    t.equal(forwarded.length, 1);
    const sent = forwarded[0]!;
    t.equal(sent.path, '/v1/messages');
    t.equal((sent.body as { model: string }).model, 'claude-real-1', 'the upstream gets its own model name');
    t.equal((sent.body as { system: string }).system, 'be brief');
    t.equal(sent.headers['x-api-key'], ANTHROPIC_SECRET, 'the upstream secret goes as x-api-key');
    t.equal(sent.headers.authorization, undefined, 'and not as a bearer token');
    t.notOk(JSON.stringify(sent.headers).includes(caller.secret), "the caller's key never reaches the upstream");
    t.equal(sent.headers['x-request-id'], requestId);

    const record = await recordOf(requestId);
    t.match(record, {
      api: 'messages',
      surface: 'model',
      nodeId: 'node-anthropic',
      configVersion: 3,
      keyId: 'key-1',
      model: 'claude',
      upstream: 'claude-primary',
      upstreamModel: 'claude-real-1',
      stream: false,
      status: 'ok',
      httpStatus: 200,
      errorCode: null,
    });
    t.same(record.usage, { inputTokens: data.usage.input_tokens, outputTokens: data.usage.output_tokens, estimated: false });
  });

  t.test('a streamed message yields the text delta by delta, ends with message_stop, and records the streamed usage', async (t) => {
    const { data: stream, response } = await client()
      .messages.create({ model: 'claude', max_tokens: 256, stream: true, messages: [{ role: 'user', content: 'stream me a reply please' }] })
      .withResponse();
    t.match(response.headers.get('content-type'), /^text\/event-stream/);
    const requestId = response.headers.get('x-request-id');
    const types: string[] = [];
    const pieces: string[] = [];
    let model = '';
    let outputTokens = 0;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'message_start') model = event.message.model;
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') pieces.push(event.delta.text);
      if (event.type === 'message_delta') outputTokens = event.usage.output_tokens;
    }
    const text = `${FAKE_ANTHROPIC_PREFIX}stream me a reply please`;
    t.equal(model, 'claude');
    t.ok(pieces.length > 3, 'several deltas');
    t.equal(pieces.join(''), text);
    t.equal(types[0], 'message_start');
    t.equal(types.at(-1), 'message_stop');
    t.equal((primary.requests.at(-1)!.body as { stream: boolean }).stream, true);

    const record = await recordOf(requestId);
    t.match(record, { api: 'messages', model: 'claude', stream: true, status: 'ok', upstream: 'claude-primary' });
    t.same(record.usage, { inputTokens: fakeTokenCount('stream me a reply please'), outputTokens, estimated: false });
    t.equal(outputTokens, fakeTokenCount(text));
  });

  t.test("the SDK's stream helper assembles the final message", async (t) => {
    const message = await client()
      .messages.stream({ model: 'claude', max_tokens: 64, messages: [{ role: 'user', content: [{ type: 'text', text: 'blocks work too' }] }] })
      .finalMessage();
    t.equal(message.model, 'claude');
    t.match(message.content, [{ type: 'text', text: `${FAKE_ANTHROPIC_PREFIX}blocks work too` }]);
    t.equal(message.content.length, 1);
    t.equal(message.stop_reason, 'end_turn');
  });

  t.test("the caller's anthropic-version and anthropic-beta reach the upstream; a missing version gets the default", async (t) => {
    await client().messages.create(
      { model: 'claude', max_tokens: 16, messages: [{ role: 'user', content: 'beta' }] },
      { headers: { 'anthropic-beta': 'prompt-caching-2024-07-31, tools-2024-04-04', 'anthropic-version': '2023-01-01' } },
    );
    const sent = primary.requests.at(-1)!;
    t.equal(sent.headers['anthropic-beta'], 'prompt-caching-2024-07-31, tools-2024-04-04');
    t.equal(sent.headers['anthropic-version'], '2023-01-01');

    const res = await fetch(`${origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': caller.secret },
      body: JSON.stringify({ model: 'claude', max_tokens: 16, messages: [{ role: 'user', content: 'no version' }] }),
    });
    t.equal(res.status, 200);
    t.equal(primary.requests.at(-1)!.headers['anthropic-version'], '2023-06-01');
  });

  t.test('refusals are the typed SDK errors with our code in error.code and details.error_code', async (t) => {
    const invalidKey = await sdkError(client('zn_sk_not-a-key').messages.create({ model: 'claude', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }));
    t.type(invalidKey, Anthropic.AuthenticationError);
    t.equal(invalidKey.type, 'authentication_error');
    t.same(codesOf(invalidKey), ['ZN_ERR_API_KEY_INVALID', 'ZN_ERR_API_KEY_INVALID']);
    t.match(invalidKey.requestID, REQUEST_ID, "the SDK's requestID is the node's request id");

    const missing = await fetch(`${origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'claude', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }),
    });
    t.equal(missing.status, 401);
    t.match(await missing.json(), { type: 'error', error: { type: 'authentication_error', code: 'ZN_ERR_API_KEY_MISSING' } });

    const notAllowed = await sdkError(client(restricted.secret).messages.create({ model: 'claude', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }));
    t.type(notAllowed, Anthropic.PermissionDeniedError);
    t.same(codesOf(notAllowed), ['ZN_ERR_MODEL_NOT_ALLOWED', 'ZN_ERR_MODEL_NOT_ALLOWED']);

    const unknown = await sdkError(client().messages.create({ model: 'claude-nope', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }));
    t.type(unknown, Anthropic.NotFoundError);
    t.equal(unknown.type, 'not_found_error');
    t.same(codesOf(unknown), ['ZN_ERR_MODEL_NOT_FOUND', 'ZN_ERR_MODEL_NOT_FOUND']);

    const invalid = await sdkError(client().messages.create({ model: 'claude', messages: [{ role: 'user', content: 'x' }] } as never));
    t.type(invalid, Anthropic.BadRequestError);
    t.same(codesOf(invalid), ['ZN_ERR_INVALID_REQUEST', 'ZN_ERR_INVALID_REQUEST']);
    t.match(invalid.message, /max_tokens/);

    const record = await recordOf(invalid.requestID);
    t.match(record, { api: 'messages', status: 'rejected', httpStatus: 400, errorCode: 'ZN_ERR_INVALID_REQUEST', upstream: null });
  });

  t.test('an alias of the other API family is refused with ZN_ERR_MODEL_WRONG_API, both ways', async (t) => {
    const before = openAiUpstream.requests.length;
    const onMessages = await sdkError(client().messages.create({ model: 'echo', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }));
    t.type(onMessages, Anthropic.BadRequestError);
    t.same(codesOf(onMessages), ['ZN_ERR_MODEL_WRONG_API', 'ZN_ERR_MODEL_WRONG_API']);
    t.match(onMessages.message, /chat\/completions/, 'the message names the API to use');
    t.equal(openAiUpstream.requests.length, before, 'nothing was forwarded');

    const primaryBefore = primary.requests.length;
    const openai = new OpenAI({ baseURL: `${origin}/v1`, apiKey: caller.secret, maxRetries: 0, timeout: 20_000 });
    let onChat: unknown;
    try {
      await openai.chat.completions.create({ model: 'claude', messages: [{ role: 'user', content: 'x' }] });
    } catch (err) {
      onChat = err;
    }
    t.type(onChat, OpenAI.BadRequestError);
    t.equal((onChat as InstanceType<typeof OpenAI.APIError>).code, 'ZN_ERR_MODEL_WRONG_API');
    t.match((onChat as Error).message, /\/v1\/messages/);
    t.equal(primary.requests.length, primaryBefore, 'nothing was forwarded');
  });

  t.test('a 5xx from the chosen target falls back to the next one, and the record lists both attempts', async (t) => {
    primary.setBehaviour({ failNext: { count: 1, status: 529 } });
    const backupBefore = backup.requests.length;
    const { data, response } = await client()
      .messages.create({ model: 'claude', max_tokens: 32, messages: [{ role: 'user', content: 'fall back' }] })
      .withResponse();
    t.equal(data.content[0]?.type === 'text' ? data.content[0].text : '', `${FAKE_ANTHROPIC_PREFIX}fall back`);
    t.equal(data.model, 'claude');
    t.equal(backup.requests.length, backupBefore + 1);
    t.equal((backup.requests.at(-1)!.body as { model: string }).model, 'claude-real-2', 'the fallback gets its own model name');
    const record = await recordOf(response.headers.get('x-request-id'));
    t.match(record, { status: 'ok', upstream: 'claude-backup', upstreamModel: 'claude-real-2' });
    t.match(record.attempts, [
      { upstream: 'claude-primary', model: 'claude-real-1', outcome: 'status', httpStatus: 529 },
      { upstream: 'claude-backup', model: 'claude-real-2', outcome: 'ok' },
    ]);
  });

  t.test('a 4xx from the upstream is final: no fallback, the status passes through with our code', async (t) => {
    primary.setBehaviour({ failNext: { count: 1, status: 400 } });
    const backupBefore = backup.requests.length;
    const err = await sdkError(client().messages.create({ model: 'claude', max_tokens: 32, messages: [{ role: 'user', content: 'bad' }] }));
    t.type(err, Anthropic.BadRequestError);
    t.same(codesOf(err), ['ZN_ERR_UPSTREAM_ERROR', 'ZN_ERR_UPSTREAM_ERROR']);
    t.equal(backup.requests.length, backupBefore);
    t.match(await recordOf(err.requestID), { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_ERROR', attempts: [{ outcome: 'status', httpStatus: 400 }] });
  });

  t.test('a target that does not answer in time falls back', async (t) => {
    primary.setBehaviour({ hang: true });
    t.teardown(() => primary.setBehaviour({}));
    const { data, response } = await client()
      .messages.create({ model: 'claude-quick', max_tokens: 32, messages: [{ role: 'user', content: 'quick' }] })
      .withResponse();
    t.equal(data.model, 'claude-quick');
    const record = await recordOf(response.headers.get('x-request-id'));
    t.match(record, { status: 'ok', upstream: 'claude-backup' });
    t.match(record.attempts, [{ upstream: 'claude-impatient', outcome: 'timeout' }, { upstream: 'claude-backup', outcome: 'ok' }]);
  });

  t.test('when every target fails the SDK sees a server error with the last code', async (t) => {
    primary.setBehaviour({ failNext: { count: 1, status: 503 } });
    backup.setBehaviour({ failNext: { count: 1, status: 500 } });
    const err = await sdkError(client().messages.create({ model: 'claude', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }));
    t.type(err, Anthropic.InternalServerError);
    t.equal(err.status, 502);
    t.equal(err.type, 'api_error');
    t.same(codesOf(err), ['ZN_ERR_UPSTREAM_ERROR', 'ZN_ERR_UPSTREAM_ERROR']);
  });

  t.test('a stream the upstream cuts or fails ends with an error event the SDK raises, and the record says failed', async (t) => {
    primary.setBehaviour({ cutStreamAfterEvents: 4 });
    t.teardown(() => primary.setBehaviour({}));
    const pieces: string[] = [];
    const { data: stream, response } = await client()
      .messages.create({ model: 'claude', max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'this stream will break' }] })
      .withResponse();
    const cut = await sdkError(
      (async () => {
        for await (const event of stream) if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') pieces.push(event.delta.text);
      })(),
    );
    t.ok(pieces.length > 0, 'the text before the cut arrived');
    t.equal(cut.type, 'api_error');
    t.same(codesOf(cut), ['ZN_ERR_UPSTREAM_UNAVAILABLE', 'ZN_ERR_UPSTREAM_UNAVAILABLE']);
    t.match(await recordOf(response.headers.get('x-request-id')), { status: 'failed', stream: true, errorCode: 'ZN_ERR_UPSTREAM_UNAVAILABLE' });

    primary.setBehaviour({ errorEventAfterEvents: 4 });
    const failed = await sdkError(
      (async () => {
        const events = await client().messages.create({ model: 'claude', max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'overload me' }] });
        for await (const event of events) void event;
      })(),
    );
    t.same(codesOf(failed), ['ZN_ERR_UPSTREAM_ERROR', 'ZN_ERR_UPSTREAM_ERROR']);
    t.match(failed.message, /overloaded_error/);
    t.equal(failed.type, 'overloaded_error', 'the upstream\'s error type goes on (an SDK may act on it), not the node\'s api_error');
  });

  t.test('a stream that fails before its first event falls back, since nothing reached the caller yet', async (t) => {
    for (const [what, behaviour] of [
      ['an overloaded error event', { errorEventAfterEvents: 0 }],
      ['a cut before any event', { cutStreamAfterEvents: 0 }],
    ] as const) {
      primary.setBehaviour(behaviour);
      const { data: stream, response } = await client()
        .messages.create({ model: 'claude', max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'second chance' }] })
        .withResponse();
      let text = '';
      for await (const event of stream) if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
      t.equal(text, `${FAKE_ANTHROPIC_PREFIX}second chance`, what);
      const record = await recordOf(response.headers.get('x-request-id'));
      t.match(record, { status: 'ok', upstream: 'claude-backup' }, what);
      t.match(record.attempts, [{ upstream: 'claude-primary', outcome: what.includes('cut') ? 'connect' : 'error' }, { upstream: 'claude-backup', outcome: 'ok' }], what);
    }
    primary.setBehaviour({});
  });

  t.test("a guardrail policy masks the caller's text before it goes upstream and the answer's text in JSON and in streams", async (t) => {
    const before = primary.requests.length;
    const prompt = 'mail jane.doe@example.com a banana split';
    const json = await client(guarded.secret).messages.create({ model: 'claude', max_tokens: 64, system: 'write to ops@example.com', messages: [{ role: 'user', content: prompt }] });
    const sent = primary.requests[before]!.body as { system: string; messages: Array<{ content: string }> };
    t.notOk(sent.system.includes('ops@example.com'), 'the system prompt was masked before forwarding');
    t.notOk(sent.messages[0]!.content.includes('jane.doe@example.com'), 'the message was masked before forwarding');
    t.ok(sent.messages[0]!.content.includes('banana split'), 'output-only rules leave the input alone');
    const jsonText = json.content[0]?.type === 'text' ? json.content[0].text : '';
    t.ok(jsonText.startsWith(FAKE_ANTHROPIC_PREFIX) && jsonText.endsWith(' split'), 'the rest of the answer is intact');
    t.notOk(jsonText.includes('banana'), 'the JSON answer was masked');

    const stream = await client(guarded.secret).messages.create({ model: 'claude', max_tokens: 64, stream: true, messages: [{ role: 'user', content: prompt }] });
    const pieces: string[] = [];
    let last = '';
    for await (const event of stream) {
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') pieces.push(event.delta.text);
      last = event.type;
    }
    t.equal(pieces.join(''), jsonText, 'the stream carries the same masked text, framing intact');
    t.equal(last, 'message_stop');

    const blocked = await sdkError(client(guarded.secret).messages.create({ model: 'claude', max_tokens: 8, messages: [{ role: 'user', content: 'a forbidden word' }] }));
    t.type(blocked, Anthropic.BadRequestError);
    t.same(codesOf(blocked), ['ZN_ERR_GUARDRAIL_BLOCKED', 'ZN_ERR_GUARDRAIL_BLOCKED']);
  });

  t.test('a caller that leaves mid-stream aborts the upstream call and the partial usage is recorded', async (t) => {
    primary.setBehaviour({ eventDelayMs: 100 });
    t.teardown(() => primary.setBehaviour({}));
    const abortedBefore = primary.abortedStreams();
    const { data: stream, response } = await client()
      .messages.create({ model: 'claude', max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'a long answer that the caller will not wait for' }] })
      .withResponse();
    for await (const event of stream) {
      if (event.type === 'content_block_delta') break; // the SDK aborts its request on break
    }
    await waitFor(() => primary.abortedStreams() > abortedBefore, { what: 'the upstream stream to be cut' });
    const record = await recordOf(response.headers.get('x-request-id'));
    t.match(record, { status: 'aborted', stream: true, upstream: 'claude-primary' });
    t.equal(record.usage.inputTokens, fakeTokenCount('a long answer that the caller will not wait for'), "message_start's input usage is kept");
    // message_start's output count is a placeholder 1; the text sent ("[fake " at least) is counted instead.
    t.ok(record.usage.outputTokens >= estimateTokens('[fake '), 'the output delivered before the caller left is metered');
    t.equal(record.usage.estimated, true, 'no final usage arrived, so it is an estimate');
  });

  t.test('the upstream secret is never echoed to the caller nor logged, even when the upstream quotes it', async (t) => {
    // Both targets refuse the node's key (a refused key moves on to the fallback).
    const refusal = { count: 1, status: 401, body: { type: 'error', error: { type: 'authentication_error', message: `bad key ${ANTHROPIC_SECRET}` } } };
    primary.setBehaviour({ failNext: refusal });
    backup.setBehaviour({ failNext: refusal });
    const res = await fetch(`${origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': caller.secret },
      body: JSON.stringify({ model: 'claude', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }),
    });
    const body = await res.text();
    t.equal(res.status, 502, "an upstream auth failure is the node's problem, not the caller's");
    t.match(JSON.parse(body), { type: 'error', error: { type: 'api_error', code: 'ZN_ERR_UPSTREAM_ERROR' } });
    t.notOk(body.includes(ANTHROPIC_SECRET));
    t.notOk(logLines.some((line) => line.includes(ANTHROPIC_SECRET)), 'no log line carries the upstream secret');
    t.notOk(logLines.some((line) => line.includes(caller.secret)), "no log line carries the caller's key");
  });
});
