// The secret detector and JSON read as structured data: a string value whose object key names a
// secret (`{"password": "…"}`) is a secret as the text form `password=…` is, on every surface that
// walks JSON (tool-call arguments and input, both ways and streamed, MCP params and results).
// Checked slot by slot, the value had no name beside it and went through in clear.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { ConfigBundle, GuardrailPolicy, RequestRecord } from '../../../proto/src/index.js';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { namesSecret } from '../../../edge-node/src/guardrails/detectors/secret.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';
import { policy } from './guardrail-fixtures.js';
import { startGuardedNode } from './guarded-node.js';

const SECRET = 'Sup3rS3cretValue';
const RULES: GuardrailPolicy['rules'] = [{ detector: 'secret', action: 'mask', on: 'both' }];

const chatAnswer = (toolArguments: string) => ({
  json: {
    id: 'x', object: 'chat.completion', model: 'm',
    choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'login', arguments: toolArguments } }] }, finish_reason: 'tool_calls' }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  },
});

async function chat(node: { baseURL: string; secret: string }, stream = false): Promise<string> {
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'log me in' }], ...(stream ? { stream: true } : {}) }),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`status ${res.status}: ${text}`);
  return text;
}

t.test('a key names a secret by the same name rule as an assignment, exceptions included', async (t) => {
  for (const name of ['password', 'api_key', 'db_password', 'x-api-key', 'accessToken', 'SECRET_KEY', 'tokenizer_password', '密码', 'user password']) t.ok(namesSecret(name), name);
  for (const name of ['password_url', 'token_type', 'secret_name', 'tokenizer', 'secretary', 'password hint', 'username', '']) t.notOk(namesSecret(name), name);
});

t.test("an OpenAI JSON answer's tool-call arguments have a password value masked", async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  upstream.answer = chatAnswer(JSON.stringify({ user: 'bob', password: SECRET }));
  const answer = JSON.parse(await chat(node)) as { choices: { message: { tool_calls: { function: { arguments: string } }[] } }[] };
  const args = JSON.parse(answer.choices[0]!.message.tool_calls[0]!.function.arguments) as Record<string, string>;
  t.same(args, { user: 'bob', password: '[SECRET]' });
});

t.test('keys whose last word says the value is about a secret, and all-digit values, are left alone', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  const args = { password_url: 'https://id.example.com/reset', token_count: '12345678', token_type: 'bearer-access', secret_name: 'prod-database' };
  upstream.answer = chatAnswer(JSON.stringify(args));
  const text = await chat(node);
  t.notMatch(text, /\[SECRET\]/);
  const answer = JSON.parse(text) as { choices: { message: { tool_calls: { function: { arguments: string } }[] } }[] };
  t.same(JSON.parse(answer.choices[0]!.message.tool_calls[0]!.function.arguments), args);
});

t.test("an Anthropic request's tool_use input has its api_key value masked before it is forwarded", async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  upstream.answer = {
    json: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude', content: [{ type: 'text', text: 'ok' }], stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 } },
  };
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret },
    body: JSON.stringify({
      model: 'claude', max_tokens: 10,
      tools: [{ name: 'login', input_schema: { type: 'object' } }],
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't0', name: 'login', input: { api_key: SECRET, region: 'eu-west-1' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't0', content: 'ok' }] },
      ],
    }),
  });
  t.equal(res.status, 200, await res.text());
  const forwarded = upstream.requests.at(-1)!.text;
  t.notMatch(forwarded, SECRET);
  const body = JSON.parse(forwarded) as { messages: { content: { input?: unknown }[] }[] };
  t.same(body.messages[1]!.content[0]!.input, { api_key: '[SECRET]', region: 'eu-west-1' });
});

t.test("a blocked request's kept body has a password value in tool-call arguments masked", async (t) => {
  const records: RequestRecord[] = [];
  const spool = { open: () => undefined, finalise: async (record: RequestRecord) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const { node } = await startGuardedNode(t, [...RULES, { detector: 'keywords', keywords: ['aurora'], action: 'block', on: 'input' }], { spool });
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({
      model: 'echo',
      messages: [
        { role: 'user', content: 'about aurora' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'login', arguments: JSON.stringify({ password: SECRET }) } }] },
        { role: 'user', content: 'x' },
      ],
    }),
  });
  await res.text();
  t.equal(res.status, 400);
  const id = res.headers.get('x-request-id');
  // The record is finalised after the answer is sent: wait for it, with a deadline.
  const deadline = Date.now() + 5_000;
  let record: RequestRecord | undefined;
  while ((record = records.find((r) => r.requestId === id)) === undefined && Date.now() < deadline) await new Promise((resolve) => setImmediate(resolve));
  t.ok(record, 'the request is recorded');
  const kept = record?.bodies?.request ?? '';
  t.match(kept, '[SECRET]');
  t.notMatch(kept, SECRET);
});

t.test('a streamed OpenAI tool call split across deltas has its password value masked', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
    `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  upstream.answer = {
    sse: [
      chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: 'c', type: 'function', function: { name: 'login', arguments: '{"user":"bob","pass' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: 'word":"Sup3rS3c' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: 'retValue"}' } }] }),
      chunk({}, 'tool_calls'),
      'data: [DONE]\n\n',
    ],
  };
  const text = await chat(node, true);
  let args = '';
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const event = JSON.parse(line.slice(6)) as { choices: { delta: { tool_calls?: { function?: { arguments?: string } }[] } }[] };
    for (const call of event.choices[0]?.delta.tool_calls ?? []) args += call.function?.arguments ?? '';
  }
  t.notMatch(text, 'S3cretValue');
  t.same(JSON.parse(args), { user: 'bob', password: '[SECRET]' });
});

t.test('an MCP tools/call has its password argument masked before the tool server, and a secret-named result value masked on the way back', async (t) => {
  const caller = newCallerKey();
  const received: string[] = [];
  const answer = JSON.stringify({ jsonrpc: '2.0', id: 7, result: { content: [{ type: 'text', text: 'ok' }], structuredContent: { db_password: SECRET, host: 'db.internal' } } });
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push(Buffer.concat(chunks).toString('utf8'));
      res.writeHead(200, { 'content-type': 'application/json' }).end(answer);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const bundle: ConfigBundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-guarded', caller.sha256, { guardrailPolicyId: 'p' })],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, apiKey: 'tool-key-0123456789abcdef', timeoutMs: 10_000, callMicros: 0 }],
    guardrailPolicies: [policy('p', RULES)],
  });
  const spool = { open: () => undefined, finalise: async () => undefined, keepsBodies: () => true, fullness: () => 0 };
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: bundle.nodeId, spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const res = await fetch(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`, {
    method: 'POST',
    headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'login', arguments: { user: 'bob', password: SECRET } } }),
  });
  const text = await res.text();
  t.equal(res.status, 200, text);
  t.equal(received.length, 1);
  const sent = JSON.parse(received[0]!) as { params: { arguments: unknown } };
  t.same(sent.params.arguments, { user: 'bob', password: '[SECRET]' });
  t.notMatch(text, SECRET);
  const back = JSON.parse(text) as { result: { structuredContent: unknown } };
  t.same(back.result.structuredContent, { db_password: '[SECRET]', host: 'db.internal' });
});
