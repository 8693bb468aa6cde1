// The secret detector and JSON read as structured data: a string value whose object key names a
// secret (`{"password": "…"}`) is a secret as the text form `password=…` is, on every surface that
// walks JSON (tool-call arguments and input, both ways and streamed, MCP params and results).
// Checked slot by slot, the value had no name beside it and went through in clear.
import t from 'tap';
import type { GuardrailPolicy, RequestRecord } from '../../../proto/src/index.js';
import { namesSecret } from '../../../edge-node/src/guardrails/detectors/secret.js';
import { startGuardedNode } from './guarded-node.js';
import { askToLogIn, chatChunk, guardedToolCall, loginCallAnswer, streamedToolArguments } from './login-tool-fixtures.js';

const SECRET = 'Sup3rS3cretValue';
const RULES: GuardrailPolicy['rules'] = [{ detector: 'secret', action: 'mask', on: 'both' }];

t.test('a key names a secret by the same name rule as an assignment, exceptions included', async (t) => {
  for (const name of ['password', 'api_key', 'db_password', 'x-api-key', 'accessToken', 'SECRET_KEY', 'tokenizer_password', '密码', 'user password']) t.ok(namesSecret(name), name);
  for (const name of ['password_url', 'token_type', 'secret_name', 'tokenizer', 'secretary', 'password hint', 'username', '']) t.notOk(namesSecret(name), name);
});

t.test("an OpenAI JSON answer's tool-call arguments have a password value masked", async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  upstream.answer = loginCallAnswer(JSON.stringify({ user: 'bob', password: SECRET }));
  const answer = JSON.parse(await askToLogIn(node)) as { choices: { message: { tool_calls: { function: { arguments: string } }[] } }[] };
  const args = JSON.parse(answer.choices[0]!.message.tool_calls[0]!.function.arguments) as Record<string, string>;
  t.same(args, { user: 'bob', password: '[SECRET]' });
});

t.test('keys whose last word says the value is about a secret, and all-digit values, are left alone', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  const args = { password_url: 'https://id.example.com/reset', token_count: '12345678', token_type: 'bearer-access', secret_name: 'prod-database' };
  upstream.answer = loginCallAnswer(JSON.stringify(args));
  const text = await askToLogIn(node);
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
  upstream.answer = {
    sse: [
      chatChunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: 'c', type: 'function', function: { name: 'login', arguments: '{"user":"bob","pass' } }] }),
      chatChunk({ tool_calls: [{ index: 0, function: { arguments: 'word":"Sup3rS3c' } }] }),
      chatChunk({ tool_calls: [{ index: 0, function: { arguments: 'retValue"}' } }] }),
      chatChunk({}, 'tool_calls'),
      'data: [DONE]\n\n',
    ],
  };
  const text = await askToLogIn(node, true);
  const args = streamedToolArguments(text);
  t.notMatch(text, 'S3cretValue');
  t.same(JSON.parse(args), { user: 'bob', password: '[SECRET]' });
});

t.test('an MCP tools/call has its password argument masked before the tool server, and a secret-named result value masked on the way back', async (t) => {
  const answer = JSON.stringify({ jsonrpc: '2.0', id: 7, result: { content: [{ type: 'text', text: 'ok' }], structuredContent: { db_password: SECRET, host: 'db.internal' } } });
  const { status, text, received } = await guardedToolCall(t, RULES, answer, { user: 'bob', password: SECRET });
  t.equal(status, 200, text);
  t.equal(received.length, 1);
  const sent = JSON.parse(received[0]!) as { params: { arguments: unknown } };
  t.same(sent.params.arguments, { user: 'bob', password: '[SECRET]' });
  t.notMatch(text, SECRET);
  const back = JSON.parse(text) as { result: { structuredContent: unknown } };
  t.same(back.result.structuredContent, { db_password: '[SECRET]', host: 'db.internal' });
});
