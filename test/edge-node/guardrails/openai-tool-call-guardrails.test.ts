// Guardrails over OpenAI function calling and reasoning text, through a listening node with the
// official openai client and a scripted upstream: tool-call arguments (and the legacy
// function_call) in requests, JSON answers and streams, and reasoning text, are checked like
// content; streamed arguments are held whole per tool call, so a match split across fragments or
// written with JSON escapes is still found, and without output rules the fragments pass unchanged.
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { sdkError } from '../pipeline/pipeline-harness.js';
import { rawChatStream, startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';
import { chatAnswerWith } from './odd-chat-shape-fixtures.js';

const SECRET = 'sk-proj-Abc123Def456Ghi789Jkl0';
const RULES: GuardrailRule[] = [
  { detector: 'email', action: 'mask', on: 'both' },
  { detector: 'secret', action: 'block', on: 'both' },
];
const TOOLS = [
  { type: 'function' as const, function: { name: 'send_mail', parameters: { type: 'object', properties: { to: { type: 'string' }, body: { type: 'string' } } } } },
];
const USER = [{ role: 'user' as const, content: 'mail the report' }];

const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
/** A tool call's fragment; the first one (with `name`) carries its id and name. */
const toolFragment = (index: number, args: string, name?: string): string =>
  chunk({ tool_calls: [name === undefined ? { index, function: { arguments: args } } : { index, id: `call_${index}`, type: 'function', function: { name, arguments: args } }] });
const DONE = 'data: [DONE]\n\n';

function answerWith(message: Record<string, unknown>): { json: unknown } {
  return chatAnswerWith(message, 'tool_calls');
}

t.test('guardrails over OpenAI tool calls and reasoning', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, RULES);
  const client = node.client();
  const streamBody = (secret: string): Promise<{ status: number; body: string }> => rawChatStream(node, secret, { model: 'echo', messages: USER, tools: TOOLS });

  await t.test('an e-mail inside a JSON answer\'s tool-call arguments is masked, and the arguments still parse; unmasked arguments stay byte for byte', async (t) => {
    const untouched = '{ "to" :  "nobody",\n "body": "caf\\u00e9" }';
    upstream.answer = answerWith({
      tool_calls: [
        { id: 'call_0', type: 'function', function: { name: 'send_mail', arguments: JSON.stringify({ to: 'bob@example.com', body: 'hi', cc: ['x', 'eve@example.org'] }) } },
        { id: 'call_1', type: 'function', function: { name: 'send_mail', arguments: untouched } },
      ],
      reasoning_content: 'the user is bob@example.com',
      reasoning: 'or eve@example.org',
    });
    const reply = await client.chat.completions.create({ model: 'echo', messages: USER, tools: TOOLS });
    const message = reply.choices[0]!.message as typeof reply.choices[0]['message'] & { reasoning_content?: string; reasoning?: string };
    const calls = message.tool_calls!.map((call) => (call.type === 'function' ? call.function.arguments : ''));
    t.same(JSON.parse(calls[0]!), { to: '[EMAIL]', body: 'hi', cc: ['x', '[EMAIL]'] });
    t.equal(calls[1], untouched, 'arguments without a match are not re-serialised');
    t.equal(message.reasoning_content, 'the user is [EMAIL]', 'reasoning_content is masked');
    t.equal(message.reasoning, 'or [EMAIL]', 'reasoning is masked');
  });

  await t.test('a legacy function_call in a JSON answer is masked too, and arguments that are not JSON are checked as text', async (t) => {
    upstream.answer = answerWith({ function_call: { name: 'send_mail', arguments: 'to bob@example.com, not JSON' } });
    const reply = await client.chat.completions.create({ model: 'echo', messages: USER });
    t.equal(reply.choices[0]!.message.function_call?.arguments, 'to [EMAIL], not JSON');
  });

  await t.test('a secret inside a JSON answer\'s tool-call arguments blocks the answer', async (t) => {
    upstream.answer = answerWith({ tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'send_mail', arguments: JSON.stringify({ body: `key ${SECRET}` }) } }] });
    const err = await sdkError(client.chat.completions.create({ model: 'echo', messages: USER, tools: TOOLS }));
    t.equal(err.status, 400);
    t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.notMatch(JSON.stringify(err.error), /sk-proj/);
  });

  await t.test('a secret in a request\'s tool-call arguments or legacy function_call is refused before anything reaches the upstream', async (t) => {
    upstream.answer = answerWith({ content: 'ok' });
    const history = [
      { tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'send_mail', arguments: JSON.stringify({ body: { nested: [`use ${SECRET}`] } }) } }] },
      { function_call: { name: 'send_mail', arguments: JSON.stringify({ body: SECRET }) } },
    ];
    for (const assistant of history) {
      const before = upstream.requests.length;
      const messages = [...USER, { role: 'assistant', content: null, ...assistant }, { role: 'tool', tool_call_id: 'call_0', content: 'sent' }];
      const err = await sdkError(client.chat.completions.create({ model: 'echo', messages: messages as never, tools: TOOLS }));
      t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
      t.equal(upstream.requests.length, before, 'the upstream was never called');
    }
  });

  await t.test('an e-mail in a request\'s tool-call arguments is masked in what the upstream receives; other arguments go byte for byte', async (t) => {
    upstream.answer = answerWith({ content: 'ok' });
    const untouched = '{"to": "nobody"}';
    const before = upstream.requests.length;
    await client.chat.completions.create({
      model: 'echo',
      tools: TOOLS,
      messages: [
        ...USER,
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_0', type: 'function', function: { name: 'send_mail', arguments: JSON.stringify({ to: 'bob@example.com' }) } },
            { id: 'call_1', type: 'function', function: { name: 'send_mail', arguments: untouched } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_0', content: 'delivered to eve@example.org' },
      ],
    });
    const sent = upstream.requests.slice(before);
    t.equal(sent.length, 1);
    const messages = (sent[0]!.body as { messages: Array<{ content: unknown; tool_calls?: Array<{ function: { arguments: string } }> }> }).messages;
    t.same(JSON.parse(messages[1]!.tool_calls![0]!.function.arguments), { to: '[EMAIL]' });
    t.equal(messages[1]!.tool_calls![1]!.function.arguments, untouched);
    t.equal(messages[2]!.content, 'delivered to [EMAIL]', "a tool message's content is checked as content");
  });

  const SPLIT_STREAM = [
    chunk({ role: 'assistant', content: null }),
    chunk({ reasoning_content: 'thinking of dave@exa' }),
    chunk({ reasoning_content: 'mple.com now' }),
    toolFragment(0, '', 'send_mail'),
    toolFragment(0, '{"to":"bob@exa'),
    toolFragment(0, 'mple.com","body":"hi"}'),
    toolFragment(1, '{"to":"car', 'send_mail'),
    toolFragment(1, 'ol\\u00'),
    toolFragment(1, '40example.com"}'),
    chunk({}, 'tool_calls'),
    DONE,
  ];

  await t.test('streamed tool-call arguments are masked across fragment boundaries and JSON escapes, and the SDK assembles them', async (t) => {
    upstream.answer = { sse: SPLIT_STREAM };
    const stream = client.chat.completions.stream({ model: 'echo', messages: USER, tools: TOOLS });
    const completion = await stream.finalChatCompletion();
    const calls = completion.choices[0]!.message.tool_calls!.map((call) => (call.type === 'function' ? { id: call.id, name: call.function.name, args: JSON.parse(call.function.arguments) as unknown } : {}));
    t.same(calls, [
      { id: 'call_0', name: 'send_mail', args: { to: '[EMAIL]', body: 'hi' } },
      { id: 'call_1', name: 'send_mail', args: { to: '[EMAIL]' } },
    ]);
    t.equal(completion.choices[0]!.finish_reason, 'tool_calls');
  });

  await t.test('streamed reasoning text is masked, and every tool call goes out whole before the chunk that finishes its choice', async (t) => {
    upstream.answer = { sse: SPLIT_STREAM };
    const { body } = await streamBody(node.secret);
    t.notMatch(body, /example|\\u0040/, 'no part of an address goes out');
    const chunks = sseData(body).filter((data) => data !== '[DONE]').map((data) => JSON.parse(data) as { choices: Array<{ delta: Record<string, unknown>; finish_reason: string | null }> });
    const deltas = chunks.map((c) => c.choices[0]!);
    t.equal(deltas.map((c) => (c.delta.reasoning_content as string | undefined) ?? '').join(''), 'thinking of [EMAIL] now');
    const finish = deltas.findIndex((c) => c.finish_reason !== null);
    t.equal(finish, deltas.length - 1, 'the finish chunk comes last');
    const argsOf = (index: number): string[] => deltas.flatMap((c) => ((c.delta.tool_calls as Array<{ index: number; function: { arguments: string } }> | undefined) ?? []).filter((call) => call.index === index).map((call) => call.function.arguments));
    t.same(argsOf(0).filter((a) => a !== ''), ['{"to":"[EMAIL]","body":"hi"}'], 'tool call 0 goes out as one fragment');
    t.same(argsOf(1).filter((a) => a !== ''), ['{"to":"[EMAIL]"}'], 'tool call 1 goes out as one fragment');
  });

  await t.test('a secret in streamed tool-call arguments ends the stream with the guardrail code, none of it sent', async (t) => {
    upstream.answer = { sse: [toolFragment(0, '{"body":"key sk-pr', 'send_mail'), toolFragment(0, 'oj-Abc123Def456Ghi789Jkl0"}'), chunk({}, 'tool_calls'), DONE] };
    const { status, body } = await streamBody(node.secret);
    t.equal(status, 200, 'the stream had started');
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /sk-pr|Abc123/);
    t.notMatch(body, /\[DONE\]/);
    const err = await client.chat.completions.stream({ model: 'echo', messages: USER, tools: TOOLS }).finalChatCompletion().then(() => undefined, (e: unknown) => e);
    t.match(String(err), /ZN_ERR_GUARDRAIL_BLOCKED|Blocked by guardrail/, 'the SDK raises the stream error');
  });

  // Strict tools make the SDK parse each call's arguments as soon as it takes the call as done:
  // when a fragment of the next call arrives, not at the end of the choice.
  const STRICT_TOOLS = [
    {
      type: 'function' as const,
      function: { name: 'send_mail', strict: true, parameters: { type: 'object', properties: { to: { type: 'string' } }, required: ['to'], additionalProperties: false } },
    },
  ];
  const parallelStream = (addresses: string[]): string[] => [
    chunk({ role: 'assistant', content: null }),
    ...addresses.flatMap((address, index) => [toolFragment(index, '', 'send_mail'), toolFragment(index, `{"to":"${address.slice(0, 4)}`), toolFragment(index, `${address.slice(4)}"}`)]),
    chunk({}, 'tool_calls'),
    DONE,
  ];

  for (const addresses of [['bob@example.com', 'nobody'], ['nobody', 'carol@example.com', 'somebody else']]) {
    await t.test(`${addresses.length} parallel streamed tool calls with strict tools: the SDK's done event of each call carries its whole (masked) arguments, and the final message has them all`, async (t) => {
      const expected = addresses.map((address) => ({ to: address.includes('@') ? '[EMAIL]' : address }));
      upstream.answer = { sse: parallelStream(addresses) };
      const stream = client.chat.completions.stream({ model: 'echo', messages: USER, tools: STRICT_TOOLS });
      const done: Array<{ index: number; arguments: string; parsed: unknown }> = [];
      stream.on('tool_calls.function.arguments.done', (event) => done.push({ index: event.index, arguments: event.arguments, parsed: event.parsed_arguments }));
      const completion = await stream.finalChatCompletion();
      t.same(
        done,
        expected.map((args, index) => ({ index, arguments: JSON.stringify(args), parsed: args })),
      );
      const calls = completion.choices[0]!.message.tool_calls!.map((call) => (call.type === 'function' ? call.function.arguments : ''));
      t.same(calls, expected.map((args) => JSON.stringify(args)));
    });
  }

  await t.test("each streamed tool call's whole arguments go out before the first fragment of the next call", async (t) => {
    upstream.answer = { sse: parallelStream(['bob@example.com', 'nobody', 'carol@example.com']) };
    const { body } = await streamBody(node.secret);
    const calls = sseData(body)
      .filter((data) => data !== '[DONE]')
      .flatMap((data) => ((JSON.parse(data) as { choices: Array<{ delta: { tool_calls?: Array<{ index: number; id?: string; function: { arguments: string } }> } }> }).choices[0]!.delta.tool_calls ?? []));
    const starts = calls.flatMap((call, at) => (call.id === undefined ? [] : [at]));
    const whole = calls.flatMap((call, at) => (call.function.arguments === '' ? [] : [{ at, index: call.index, args: call.function.arguments }]));
    t.same(whole.map((w) => [w.index, w.args]), [[0, '{"to":"[EMAIL]"}'], [1, '{"to":"nobody"}'], [2, '{"to":"[EMAIL]"}']], 'one fragment per call');
    t.ok(whole[0]!.at < starts[1]! && whole[1]!.at < starts[2]!, 'call 0 and call 1 went out before the next call started');
  });

  await t.test("a tool call that starts with its id and name only (vLLM) ends the call before it: the SDK's done events and final message carry each call's whole arguments, call 0 masked", async (t) => {
    const nameOnly = (index: number): string => chunk({ tool_calls: [{ index, id: `call_${index}`, type: 'function', function: { name: 'send_mail' } }] });
    const sse = [chunk({ role: 'assistant', content: null }), nameOnly(0), toolFragment(0, '{"to":"x@example.com"}'), nameOnly(1), toolFragment(1, '{"to":"b"}'), chunk({}, 'tool_calls'), DONE];
    upstream.answer = { sse };
    const stream = client.chat.completions.stream({ model: 'echo', messages: USER, tools: STRICT_TOOLS });
    const done: Array<{ index: number; arguments: string }> = [];
    stream.on('tool_calls.function.arguments.done', (event) => done.push({ index: event.index, arguments: event.arguments }));
    const completion = await stream.finalChatCompletion();
    t.same(done, [
      { index: 0, arguments: '{"to":"[EMAIL]"}' },
      { index: 1, arguments: '{"to":"b"}' },
    ]);
    t.same(
      completion.choices[0]!.message.tool_calls!.map((call) => (call.type === 'function' ? [call.id, call.function.arguments] : [])),
      [
        ['call_0', '{"to":"[EMAIL]"}'],
        ['call_1', '{"to":"b"}'],
      ],
    );
    upstream.answer = { sse };
    const { body } = await streamBody(node.secret);
    const calls = sseData(body)
      .filter((data) => data !== '[DONE]')
      .flatMap((data) => ((JSON.parse(data) as { choices: Array<{ delta: { tool_calls?: Array<{ index: number; id?: string; function: Record<string, unknown> }> } }> }).choices[0]!.delta.tool_calls ?? []));
    t.same(
      calls.map((call) => [call.index, call.id ?? null, call.function.arguments ?? null]),
      [
        [0, 'call_0', null],
        [0, null, ''],
        [0, null, '{"to":"[EMAIL]"}'],
        [1, 'call_1', null],
        [1, null, ''],
        [1, null, '{"to":"b"}'],
      ],
      'the held call goes out just before the next call starts; a chunk without arguments gets none added',
    );
  });

  await t.test('tool-call arguments sent as a JSON object are checked string by string: in a request (masked, or refused) and in a JSON answer', async (t) => {
    upstream.answer = answerWith({ content: 'ok' });
    const history = (args: unknown): unknown[] => [...USER, { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'send_mail', arguments: args } }] }, { role: 'tool', tool_call_id: 'call_0', content: 'sent' }];
    const before = upstream.requests.length;
    const err = await sdkError(client.chat.completions.create({ model: 'echo', messages: history({ body: { nested: [`use ${SECRET}`] } }) as never, tools: TOOLS }));
    t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.equal(upstream.requests.length, before, 'the upstream was never called');
    await client.chat.completions.create({ model: 'echo', messages: history({ to: ['bob@example.com'] }) as never, tools: TOOLS });
    const sent = upstream.requests.at(-1)!.body as { messages: Array<{ tool_calls?: Array<{ function: { arguments: unknown } }> }> };
    t.same(sent.messages[1]!.tool_calls![0]!.function.arguments, { to: ['[EMAIL]'] }, 'masked in place, still an object');

    upstream.answer = answerWith({ tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'send_mail', arguments: { to: 'carol@example.com' } } }] });
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
      body: JSON.stringify({ model: 'echo', messages: USER, tools: TOOLS }),
    });
    const answer = (await res.json()) as { choices: Array<{ message: { tool_calls: Array<{ function: { arguments: unknown } }> } }> };
    t.same(answer.choices[0]!.message.tool_calls[0]!.function.arguments, { to: '[EMAIL]' });
  });

  await t.test('streamed tool-call arguments sent as a JSON object are checked whole and go out as their (masked) JSON text', async (t) => {
    const objectCall = (index: number, args: unknown): string => chunk({ tool_calls: [{ index, id: `call_${index}`, type: 'function', function: { name: 'send_mail', arguments: args } }] });
    upstream.answer = { sse: [chunk({ role: 'assistant', content: null }), objectCall(0, { to: 'bob@example.com', body: 'hi' }), objectCall(1, { to: 'nobody' }), chunk({}, 'tool_calls'), DONE] };
    const completion = await client.chat.completions.stream({ model: 'echo', messages: USER, tools: TOOLS }).finalChatCompletion();
    t.same(
      completion.choices[0]!.message.tool_calls!.map((call) => (call.type === 'function' ? call.function.arguments : '')),
      ['{"to":"[EMAIL]","body":"hi"}', '{"to":"nobody"}'],
    );
    upstream.answer = { sse: [objectCall(0, { body: [`key ${SECRET}`] }), chunk({}, 'tool_calls'), DONE] };
    const { body } = await streamBody(node.secret);
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /Abc123/);
  });

  await t.test('a refusal is checked as text: in a request, in a JSON answer and streamed across chunks', async (t) => {
    upstream.answer = answerWith({ content: 'ok' });
    await client.chat.completions.create({ model: 'echo', messages: [...USER, { role: 'assistant', content: null, refusal: 'I will not mail bob@example.com' }, ...USER] as never });
    const sent = upstream.requests.at(-1)!.body as { messages: Array<{ refusal?: string }> };
    t.equal(sent.messages[1]!.refusal, 'I will not mail [EMAIL]');
    const before = upstream.requests.length;
    const err = await sdkError(client.chat.completions.create({ model: 'echo', messages: [...USER, { role: 'assistant', content: null, refusal: `not with ${SECRET}` }] as never }));
    t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.equal(upstream.requests.length, before, 'the upstream was never called');

    upstream.answer = answerWith({ refusal: 'I will not mail carol@example.com' });
    const answer = await client.chat.completions.create({ model: 'echo', messages: USER });
    t.equal(answer.choices[0]!.message.refusal, 'I will not mail [EMAIL]');

    upstream.answer = { sse: [chunk({ role: 'assistant', content: null, refusal: null }), chunk({ refusal: 'I will not mail dave@exa' }), chunk({ refusal: 'mple.com, sorry' }), chunk({}, 'stop'), DONE] };
    const { body } = await streamBody(node.secret);
    t.notMatch(body, /example/);
    const refusal = sseData(body)
      .filter((data) => data !== '[DONE]')
      .map((data) => ((JSON.parse(data) as { choices: Array<{ delta: { refusal?: string | null } }> }).choices[0]!.delta.refusal ?? ''))
      .join('');
    t.equal(refusal, 'I will not mail [EMAIL], sorry');
  });

  await t.test('a streamed chunk whose JSON repeats a key goes out as what was checked: the value JSON.parse dropped never reaches the caller', async (t) => {
    // JSON.parse keeps the last of two keys; a client that keeps the first would read the other.
    const duplicate = (field: string, first: string): string => `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"echo","choices":[{"index":0,"delta":{"${field}":"${first}","${field}":""},"finish_reason":null}]}\n\n`;
    for (const field of ['content', 'reasoning_content', 'refusal']) {
      upstream.answer = { sse: [chunk({ role: 'assistant', content: '' }), duplicate(field, `key ${SECRET}`), chunk({ content: 'done' }, 'stop'), DONE] };
      const { status, body } = await streamBody(node.secret);
      t.equal(status, 200, field);
      t.notMatch(body, /sk-proj/, `${field}: the dropped value is not in what went out`);
      t.match(body, /done/, `${field}: the stream goes on`);
    }
  });

  await t.test('without output rules, streamed tool-call fragments pass byte for byte', async (t) => {
    upstream.answer = { sse: SPLIT_STREAM };
    const { body } = await streamBody(plainSecret);
    t.same(sseData(body), SPLIT_STREAM.map((event) => event.slice('data: '.length, -2)));
  });
});
