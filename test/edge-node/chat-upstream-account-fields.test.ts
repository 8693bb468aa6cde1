// The caller's chat body is forwarded as sent, so some of its fields would act for the operator's
// upstream account rather than the caller: a `service_tier` OpenAI bills above the standard price
// and a `speed` other than standard (fast mode, billed at several times the price; on /v1/messages
// also its `anthropic-beta`), while the node charges only its own per-token price, and `store: true`
// (the conversation kept in the operator's OpenAI account). Server tools the upstream bills per use
// on top of tokens are refused the same way: chat `web_search_options`, and on /v1/messages
// Anthropic's web search and code execution tools and a code execution `container`; so are the
// fields naming other models a router or proxy would serve instead of the alias, past the key's
// allowed models (OpenRouter's `models`, `route` and `plugins`, LiteLLM's `fallbacks`,
// `context_window_fallbacks` and `content_policy_fallbacks`, `fallback_models`; Anthropic's server-side `fallbacks` and their beta). Each is refused, naming
// the field and why; the rest passes through.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import type { RequestRecord } from '../../proto/src/index.js';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { anthropicSdkError } from './anthropic-fixtures.js';
import { startPipelineNode, sdkError, withClaudeRoute } from './pipeline/pipeline-harness.js';

t.test('chat fields that act for the upstream account', async (t) => {
  const upstream = await startFakeUpstream(t);
  const anthropic = await startFakeAnthropicUpstream(t);
  const records: RequestRecord[] = [];
  const spool = { open: () => undefined, finalise: async (record: RequestRecord) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    services: { spool },
    bundle: (base) => ({
      ...withClaudeRoute(base, anthropic.url),
      prices: [{ model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 10, requestMicros: 0 }],
    }),
  });
  const chat = (extra: Record<string, unknown>) => ({ model: 'echo', messages: [{ role: 'user' as const, content: 'hi' }], max_tokens: 5, ...extra });

  t.test('a service tier billed above the standard price is refused, naming the field and why', async (t) => {
    for (const tier of ['priority', 'scale', 'anything-else']) {
      const err = await sdkError(node.client().chat.completions.create(chat({ service_tier: tier }) as never));
      t.equal(err.status, 400, tier);
      t.equal(err.code, 'ZN_ERR_INVALID_REQUEST', tier);
      t.equal(err.param, 'service_tier', tier);
      t.match(err.message, /service_tier: must be one of "auto", "default", "flex": other tiers are billed above the price this node charges/, tier);
    }
    t.equal(upstream.requests.length, 0, 'nothing was forwarded');
  });

  t.test('store: true is refused, naming the field and why', async (t) => {
    const err = await sdkError(node.client().chat.completions.create(chat({ store: true }) as never));
    t.match(err, { status: 400, code: 'ZN_ERR_INVALID_REQUEST', param: 'store', message: /store: only false: true would keep the conversation in the operator's upstream account/ });
    t.equal(upstream.requests.length, 0, 'nothing was forwarded');
  });

  t.test('the standard tiers, store: false and their absence pass through as sent', async (t) => {
    for (const extra of [{ service_tier: 'auto' }, { service_tier: 'default' }, { service_tier: 'flex' }, { service_tier: null }, { store: false }, { store: null }, {}]) {
      await node.client().chat.completions.create(chat(extra) as never);
      t.match(upstream.requests.at(-1)?.body, extra, JSON.stringify(extra));
    }
  });

  t.test('a speed other than standard is refused, naming the field and why', async (t) => {
    const before = upstream.requests.length;
    for (const speed of ['fast', 'turbo']) {
      const err = await sdkError(node.client().chat.completions.create(chat({ speed }) as never));
      t.match(err, { status: 400, code: 'ZN_ERR_INVALID_REQUEST', param: 'speed', message: /speed: only "standard": faster speeds are billed above the price this node charges/ }, speed);
    }
    t.equal(upstream.requests.length, before, 'nothing was forwarded');
    await node.client().chat.completions.create(chat({ speed: 'standard' }) as never);
    t.match(upstream.requests.at(-1)?.body, { speed: 'standard' }, 'speed: "standard" passes through');
  });

  t.test('web_search_options is refused, naming the field and why, as JSON and as a stream', async (t) => {
    const before = upstream.requests.length;
    for (const [what, extra] of [
      ['{}', { web_search_options: {} }],
      ['a context size', { web_search_options: { search_context_size: 'high' } }],
      ['{} in a stream', { web_search_options: {}, stream: true }],
    ] as const) {
      const err = await sdkError(node.client().chat.completions.create(chat(extra) as never));
      t.match(err, { status: 400, code: 'ZN_ERR_INVALID_REQUEST', param: 'web_search_options', message: /web_search_options: not passed on: the upstream bills each web search on top of the tokens, above the price this node charges/ }, what);
    }
    t.equal(upstream.requests.length, before, 'nothing was forwarded');
    for (const extra of [{ web_search_options: null }, {}]) {
      await node.client().chat.completions.create(chat(extra) as never);
      const forwarded = upstream.requests.at(-1)?.body as Record<string, unknown>;
      t.same(forwarded.web_search_options, extra.web_search_options, `${JSON.stringify(extra)} passes through as sent`);
    }
  });

  const OTHER_MODELS_REFUSAL = /not passed on: it names models the upstream would serve instead of the alias, past the models this key may use and the price this node charges/;
  const otherModels: Array<[string, Record<string, unknown>]> = [
    ['models', { models: ['openai/o1-pro', 'anthropic/claude-opus-4'] }],
    ['models', { models: ['openai/o1-pro'], route: 'fallback' }],
    ['route', { route: 'fallback' }],
    ['fallbacks', { fallbacks: ['gpt-4.5-preview'] }],
    ['fallbacks', { fallbacks: [{ model: 'gpt-4.5-preview', messages: [{ role: 'user', content: 'hi' }] }] }],
    ['fallback_models', { fallback_models: ['gpt-4.5-preview'] }],
    ['context_window_fallbacks', { context_window_fallbacks: [{ 'gpt-3.5-turbo': ['gpt-4.5-preview'] }] }],
    ['content_policy_fallbacks', { content_policy_fallbacks: [{ 'gpt-3.5-turbo': ['claude-opus-4'] }] }],
  ];

  t.test('fields naming other models are refused on chat, naming the field, nothing forwarded, recorded rejected', async (t) => {
    const before = upstream.requests.length;
    for (const [param, extra] of otherModels) {
      for (const stream of [false, true]) {
        const what = `${JSON.stringify(extra)}${stream ? ' in a stream' : ''}`;
        const err = await sdkError(node.client().chat.completions.create(chat({ ...extra, stream }) as never));
        t.match(err, { status: 400, code: 'ZN_ERR_INVALID_REQUEST', param }, what);
        t.match(err.message, new RegExp(`Invalid request: ${param}: ${OTHER_MODELS_REFUSAL.source}`), what);
        t.match(records.at(-1), { api: 'chat.completions', status: 'rejected', errorCode: 'ZN_ERR_INVALID_REQUEST', upstreamModel: null, attempts: [], cost: { costMicros: 0 } }, what);
      }
    }
    t.equal(upstream.requests.length, before, 'nothing was forwarded');
    for (const extra of [{ models: null, route: null, fallbacks: null, context_window_fallbacks: null, content_policy_fallbacks: null, fallback_models: null, plugins: null }, {}]) {
      await node.client().chat.completions.create(chat(extra) as never);
      t.same(upstream.requests.at(-1)?.body, { ...chat(extra), model: 'demo-echo' }, `${JSON.stringify(extra)} passes through as sent`);
    }
  });

  t.test("OpenRouter's plugins are refused on chat, naming the field and why", async (t) => {
    const before = upstream.requests.length;
    for (const plugins of [[{ id: 'web', max_results: 5 }], [{ id: 'file-parser', pdf: { engine: 'mistral-ocr' } }], []]) {
      const err = await sdkError(node.client().chat.completions.create(chat({ plugins }) as never));
      t.match(err, { status: 400, code: 'ZN_ERR_INVALID_REQUEST', param: 'plugins', message: /plugins: not passed on: the upstream bills plugins \(web search and others\) per use on top of the tokens, above the price this node charges/ }, JSON.stringify(plugins));
      t.match(records.at(-1), { status: 'rejected', errorCode: 'ZN_ERR_INVALID_REQUEST' });
    }
    t.equal(upstream.requests.length, before, 'nothing was forwarded');
  });

  t.test('fields naming other models are refused on embeddings, naming the field, nothing forwarded, recorded rejected', async (t) => {
    const before = upstream.requests.length;
    const fields: Array<[string, Record<string, unknown>]> = [...otherModels, ['plugins', { plugins: [{ id: 'web' }] }]];
    for (const [param, extra] of fields) {
      const err = await sdkError(node.client().embeddings.create({ model: 'echo', input: 'hi', ...extra }));
      t.match(err, { status: 400, code: 'ZN_ERR_INVALID_REQUEST', param }, JSON.stringify(extra));
      t.match(records.at(-1), { api: 'embeddings', status: 'rejected', errorCode: 'ZN_ERR_INVALID_REQUEST', attempts: [] }, JSON.stringify(extra));
    }
    t.equal(upstream.requests.length, before, 'nothing was forwarded');
  });

  const messages = (extra: Record<string, unknown>, headers: Record<string, string> = {}) =>
    fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01', ...headers },
      body: JSON.stringify({ model: 'claude', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], ...extra }),
    });

  t.test("on /v1/messages, Anthropic's fast mode (speed or its beta) is refused in Anthropic's error shape", async (t) => {
    const before = anthropic.requests.length;
    const refusals: Array<[string, Record<string, unknown>, Record<string, string>, RegExp]> = [
      ['speed: "fast"', { speed: 'fast' }, {}, /speed: only "standard": faster speeds are billed above the price this node charges/],
      ['the fast-mode beta', {}, { 'anthropic-beta': 'fast-mode-2026-02-01' }, /anthropic-beta: no fast-mode betas: fast mode is billed above the price this node charges/],
      ['the fast-mode beta among others', {}, { 'anthropic-beta': 'prompt-caching-2024-07-31, fast-mode-2026-02-01' }, /anthropic-beta: no fast-mode betas/],
      ['the 1M context beta', {}, { 'anthropic-beta': 'prompt-caching-2024-07-31,context-1m-2025-08-07' }, /anthropic-beta: no context-1m betas: a prompt past 200K tokens with the 1M context window is billed above the price this node charges/],
      ['MCP servers the upstream would call itself', { mcp_servers: [{ type: 'url', url: 'https://mcp.example.test/sse', name: 'x' }] }, { 'anthropic-beta': 'mcp-client-2025-04-04' }, /mcp_servers: not passed on: the upstream would call these MCP servers itself/],
    ];
    for (const [what, extra, headers, message] of refusals) {
      const res = await messages(extra, headers);
      t.equal(res.status, 400, what);
      t.match(await res.json(), { type: 'error', error: { type: 'invalid_request_error', code: 'ZN_ERR_INVALID_REQUEST', message, details: { error_code: 'ZN_ERR_INVALID_REQUEST' } } }, what);
    }
    t.equal(anthropic.requests.length, before, 'nothing was forwarded');

    const res = await messages({ speed: 'standard' }, { 'anthropic-beta': 'prompt-caching-2024-07-31' });
    t.equal(res.status, 200, 'speed: "standard" and other betas pass');
    t.match(anthropic.requests.at(-1), { headers: { 'anthropic-beta': 'prompt-caching-2024-07-31' }, body: { speed: 'standard' } });
  });

  const claude = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
  const message = (extra: Record<string, unknown>) => ({ model: 'claude', max_tokens: 5, messages: [{ role: 'user' as const, content: 'hi' }], ...extra });
  const SERVER_TOOL_REFUSAL = /no web_search_… or code_execution_… tools: the upstream bills each use on top of the tokens, above the price this node charges/;

  t.test("on /v1/messages, web search and code execution tools are refused in Anthropic's error shape, as JSON and as a stream", async (t) => {
    const before = anthropic.requests.length;
    const customTool = { name: 'lookup', input_schema: { type: 'object' } };
    const refusals: Array<[string, Record<string, unknown>, RegExp]> = [
      ['web_search_20250305', { tools: [{ type: 'web_search_20250305', name: 'web_search', max_uses: 50 }] }, /tools\[0\]\.type: /],
      ['code_execution_20250522', { tools: [{ type: 'code_execution_20250522', name: 'code_execution' }] }, /tools\[0\]\.type: /],
      ['code_execution_20250825 after a client tool', { tools: [customTool, { type: 'code_execution_20250825', name: 'code_execution' }] }, /tools\[1\]\.type: /],
      ['web_search_20250305 in a stream', { tools: [{ type: 'web_search_20250305', name: 'web_search' }], stream: true }, /tools\[0\]\.type: /],
    ];
    for (const [what, extra, field] of refusals) {
      const err = await anthropicSdkError(claude.messages.create(message(extra) as never));
      t.match(err, { status: 400, errorCode: 'ZN_ERR_INVALID_REQUEST', error: { type: 'error', error: { type: 'invalid_request_error', code: 'ZN_ERR_INVALID_REQUEST' } } }, what);
      t.match(err.message, field, what);
      t.match(err.message, SERVER_TOOL_REFUSAL, what);
    }
    t.equal(anthropic.requests.length, before, 'nothing was forwarded');
  });

  t.test('on /v1/messages, a code execution container is refused, naming the field and why', async (t) => {
    const before = anthropic.requests.length;
    for (const container of ['container_011CPR5CNjB747bTd36fQLFk', { skills: [{ type: 'anthropic', skill_id: 'xlsx', version: 'latest' }] }]) {
      for (const stream of [false, true]) {
        const err = await anthropicSdkError(claude.messages.create(message({ container, stream }) as never));
        t.match(err, { status: 400, errorCode: 'ZN_ERR_INVALID_REQUEST' }, JSON.stringify({ container, stream }));
        t.match(err.message, /container: not passed on: a container runs code execution, which the upstream bills by the hour on top of the tokens, above the price this node charges/);
      }
    }
    t.equal(anthropic.requests.length, before, 'nothing was forwarded');
  });

  t.test('on /v1/messages, client tools, web fetch and no container pass through as sent', async (t) => {
    const tools = [
      { name: 'lookup', description: 'a custom tool', input_schema: { type: 'object', properties: {} } },
      { type: 'custom', name: 'typed', input_schema: { type: 'object' } },
      { type: 'web_fetch_20250910', name: 'web_fetch', max_uses: 5 },
      { type: 'text_editor_20250124', name: 'str_replace_editor' },
      { type: 'bash_20250124', name: 'bash' },
    ];
    const json = message({ tools, container: null });
    t.equal((await claude.messages.create(json as never)).model, 'claude');
    t.same(anthropic.requests.at(-1)?.body, { ...json, model: 'claude-real' }, 'as JSON');
    const streamed = message({ tools, container: null, stream: true });
    t.equal((await claude.messages.stream(streamed as never).finalMessage()).model, 'claude');
    t.same(anthropic.requests.at(-1)?.body, { ...streamed, model: 'claude-real' }, 'as a stream');
  });

  t.test("on /v1/messages, server-side fallbacks (the field or its beta) are refused in Anthropic's error shape, nothing forwarded, recorded rejected", async (t) => {
    const before = anthropic.requests.length;
    const beta = 'server-side-fallback-2026-07-01';
    const refusals: Array<[string, Record<string, unknown>, Record<string, string>, RegExp]> = [
      ['fallbacks with their beta', { fallbacks: [{ model: 'claude-opus-4-1' }] }, { 'anthropic-beta': beta }, new RegExp(`fallbacks: ${OTHER_MODELS_REFUSAL.source}`)],
      ['fallbacks without the beta', { fallbacks: [{ model: 'claude-opus-4-1' }] }, {}, /fallbacks: not passed on/],
      ['fallbacks in a stream', { fallbacks: [{ model: 'claude-opus-4-1' }], stream: true }, {}, /fallbacks: not passed on/],
      ['the beta alone', {}, { 'anthropic-beta': beta }, /anthropic-beta: no server-side-fallback betas: fallbacks serve other models than the alias, past the models this key may use and the price this node charges/],
      ['the beta among others', {}, { 'anthropic-beta': `prompt-caching-2024-07-31, ${beta}` }, /anthropic-beta: no server-side-fallback betas/],
    ];
    for (const [what, extra, headers, message] of refusals) {
      const res = await messages(extra, headers);
      t.equal(res.status, 400, what);
      t.match(await res.json(), { type: 'error', error: { type: 'invalid_request_error', code: 'ZN_ERR_INVALID_REQUEST', message, details: { error_code: 'ZN_ERR_INVALID_REQUEST' } } }, what);
      t.match(records.at(-1), { api: 'messages', status: 'rejected', errorCode: 'ZN_ERR_INVALID_REQUEST', upstreamModel: null, attempts: [] }, what);
    }
    t.equal(anthropic.requests.length, before, 'nothing was forwarded');

    const res = await messages({ fallbacks: null });
    t.equal(res.status, 200, 'fallbacks: null passes');
    t.match(anthropic.requests.at(-1), { body: { model: 'claude-real', fallbacks: null } });
  });

  t.test("Anthropic's own fields are not touched", async (t) => {
    const res = await fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'claude', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }], service_tier: 'standard_only' }),
    });
    t.equal(res.status, 200);
    t.match(anthropic.requests.at(-1)?.body, { service_tier: 'standard_only' });
  });
});
