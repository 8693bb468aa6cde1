// Shapes OpenAI never sends in a chat message's tool calls, and the `type` of a content part of a
// type the node does not know. A request message's `tool_calls` that is not an array, a
// `tool_calls` entry that is not an object and a `function_call` that is not an object have every
// string and number in them checked by input rules (as a JSON answer's have by output rules); the
// request schema lets them through, as it does every other field it does not need. A content
// part's `type` that is no tag the node knows (not `text`, `refusal`, `thinking` nor a media type)
// is checked like an unknown tool call's type: a string masked without brackets, anything else
// every string and number in it, in a request and a JSON answer; in a stream it blocks the chunk
// under output rules. Known part types, and the type tags nested in an unknown part, are left as
// they were. Each is read once: a flag rule counts one match.
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { sdkError } from '../pipeline/pipeline-harness.js';
import { rawChatStream, startGuardedNode } from './guarded-node.js';
import { SSE_DONE, USER_GO, chatAnswerWith, chatChunkEvent, checkStreamedDeltaEndsTheStream, forwardedMessages, postChat, recordedGuardrailMatches } from './odd-chat-shape-fixtures.js';

/** Text, refusal, thinking and media part types, each a keyword of a rule: none of them is checked. */
const KNOWN_PART_TYPES = ['text', 'refusal', 'thinking', 'image_url', 'input_audio', 'file', 'video_url', 'audio_url'];

const rules = (on: GuardrailRule['on']): GuardrailRule[] => [
  { detector: 'email', action: 'mask', on },
  { detector: 'phone', action: 'mask', on },
  { detector: 'keywords', keywords: ['aurora'], action: 'block', on },
  { detector: 'keywords', keywords: KNOWN_PART_TYPES, action: 'block', on },
];

const OK = chatAnswerWith({ content: 'ok' });

t.test("a request message's tool_calls that is not an array, a tool_calls entry that is not an object, and a function_call that is not an object have every string and number in them checked by input rules: a blocked keyword refuses the request before the upstream is called, an e-mail and a phone number are masked without brackets, and without input rules they are forwarded as they came", async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, rules('input'));
  const client = node.client();
  upstream.answer = OK;
  const assistant = (fields: Record<string, unknown>): Record<string, unknown> => ({ role: 'assistant', content: null, ...fields });

  for (const fields of [
    { tool_calls: ['aurora'] },
    { tool_calls: [7, 'aurora'] },
    { tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'lookup', arguments: '{}' } }, ['aurora']] },
    { tool_calls: [[{ type: 'aurora' }]] },
    { tool_calls: { x: 'aurora' } },
    { tool_calls: 'aurora' },
    { function_call: 'aurora' },
    { function_call: ['aurora'] },
  ]) {
    const sent = upstream.requests.length;
    const res = await postChat(node, node.secret, { messages: [...USER_GO, assistant(fields)] });
    t.equal(res.status, 400, JSON.stringify(fields));
    t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(res.text, /aurora/);
    t.equal(upstream.requests.length, sent, 'the upstream was never called');
  }

  t.equal((await postChat(node, node.secret, { messages: [...USER_GO, assistant({ tool_calls: ['to eve@example.org', 13912345678] })] })).status, 200);
  t.same(forwardedMessages(upstream)[1]!.tool_calls, ['to EMAIL', 'PHONE'], 'masked without brackets, the number as the masked text');
  await postChat(node, node.secret, { messages: [...USER_GO, assistant({ tool_calls: { to: 'eve@example.org' }, function_call: 'to eve@example.org' })] });
  t.same(forwardedMessages(upstream)[1], assistant({ tool_calls: { to: 'EMAIL' }, function_call: 'to EMAIL' }));

  const calls = [{ id: 'call_0', type: 'function', function: { name: 'lookup', arguments: '{}' } }];
  await client.chat.completions.create({ model: 'echo', messages: [...USER_GO, assistant({ tool_calls: calls, function_call: null }), { role: 'tool', tool_call_id: 'call_0', content: 'done' }] as never });
  t.same(forwardedMessages(upstream)[1], assistant({ tool_calls: calls, function_call: null }), 'the shapes OpenAI sends are forwarded as they came');

  const odd = assistant({ tool_calls: ['aurora', 'eve@example.org'], function_call: 'aurora' });
  t.equal((await postChat(node, plainSecret, { messages: [...USER_GO, odd] })).status, 200, 'the schema takes the shape');
  t.same(forwardedMessages(upstream)[1], odd, 'without input rules it is forwarded as it came');
});

t.test("the type of a request's content part of an unknown type is checked by input rules: a blocked keyword (also inside an object or an array, or as a number) refuses the request, an e-mail is masked without brackets and the type tags nested in the part are left alone; text, refusal, thinking, media and type-less parts keep their types unchecked", async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, rules('input'));
  upstream.answer = OK;

  for (const type of ['aurora', { name: 'aurora' }, ['aurora'], { type: 'aurora' }]) {
    const sent = upstream.requests.length;
    const res = await postChat(node, node.secret, { messages: [{ role: 'user', content: [{ type: 'text', text: 'hello' }, { type }] }] });
    t.equal(res.status, 400, JSON.stringify(type));
    t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.equal(upstream.requests.length, sent, 'the upstream was never called');
  }
  const sent = upstream.requests.length;
  t.equal((await postChat(node, node.secret, { messages: USER_GO, prediction: { type: 'content', content: [{ type: 'aurora' }] } })).status, 400, "in a prediction's parts too");
  t.equal(upstream.requests.length, sent);

  await postChat(node, node.secret, { messages: [{ role: 'user', content: [{ type: 'to eve@example.org', lookup: { type: 'query', query: 'weather' } }, { type: 13912345678 }] }] });
  t.same(forwardedMessages(upstream)[0]!.content, [{ type: 'to EMAIL', lookup: { type: 'query', query: 'weather' } }, { type: 'PHONE' }], 'masked without brackets, its nested type tag left alone');

  const known = [
    { role: 'user', content: [{ type: 'text', text: 'hello' }, { text: 'no type' }, { type: 'image_url', image_url: { url: 'https://img.example/a.png' } }, { type: 'video_url', video_url: { url: 'https://img.example/a.mp4' } }, { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBERi0=' } }] },
    { role: 'assistant', content: [{ type: 'refusal', refusal: 'no' }, { type: 'thinking', thinking: [{ type: 'text', text: 'hmm' }] }] },
  ];
  const res = await postChat(node, node.secret, { messages: known });
  t.equal(res.status, 200, 'no known part type was checked');
  t.same(forwardedMessages(upstream), known, 'forwarded as they came');

  const unknown = [{ role: 'user', content: [{ type: 'aurora' }] }];
  t.equal((await postChat(node, plainSecret, { messages: unknown })).status, 200);
  t.same(forwardedMessages(upstream), unknown, 'without input rules it is forwarded as it came');
});

t.test("the type of a JSON answer's content part of an unknown type is checked by output rules: a blocked keyword blocks the answer (content one part object, or a part nested in a thinking part, too), an e-mail is masked without brackets; known part types go out as they came", async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, rules('output'));
  const client = node.client();

  for (const content of [[{ type: 'aurora' }], [{ type: { name: 'aurora' } }], [{ type: 'thinking', thinking: [{ type: 'aurora' }] }], { type: 'aurora' }]) {
    upstream.answer = chatAnswerWith({ content });
    const err = await sdkError(client.chat.completions.create({ model: 'echo', messages: USER_GO }));
    t.equal(err.code, 'ZN_ERR_GUARDRAIL_BLOCKED', JSON.stringify(content));
    t.notMatch(JSON.stringify(err.error), /aurora/);
  }

  upstream.answer = chatAnswerWith({ content: [{ type: 'to eve@example.org', lookup: { type: 'query' } }] });
  const masked = await postChat(node, node.secret, { messages: USER_GO });
  t.notMatch(masked.text, /eve@/);
  t.same((JSON.parse(masked.text) as { choices: Array<{ message: { content: unknown } }> }).choices[0]!.message.content, [{ type: 'to EMAIL', lookup: { type: 'query' } }]);

  const known = [{ type: 'text', text: 'hello' }, { type: 'refusal', refusal: 'no' }, { type: 'thinking', thinking: 'hmm' }, { type: 'image_url', image_url: { url: 'https://img.example/a.png' } }, { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }, { type: 'audio_url', audio_url: { url: 'https://img.example/a.wav' } }];
  upstream.answer = chatAnswerWith({ content: known });
  const res = await postChat(node, node.secret, { messages: USER_GO });
  t.equal(res.status, 200, 'no known part type was checked');
  t.same((JSON.parse(res.text) as { choices: Array<{ message: { content: unknown } }> }).choices[0]!.message.content, known);

  upstream.answer = chatAnswerWith({ content: [{ type: 'aurora' }] });
  t.equal((await postChat(node, plainSecret, { messages: USER_GO })).status, 200, 'without output rules it passes');
});

t.test('a streamed content part of an unknown type whose type carries text ends the stream under output rules, none of it sent; an empty type and known part types go on, and without output rules it passes byte for byte', async (t) => {
  const guarded = await startGuardedNode(t, rules('output'));
  const { upstream, node } = guarded;
  const ask = { model: 'echo', messages: USER_GO };

  for (const content of [[{ type: 'aurora' }], [{ type: 'to eve@example.org' }], [{ type: { name: 'aurora' } }], [{ type: ['aurora'] }], [{ type: 13912345678 }], [{ type: 'thinking', thinking: [{ type: 'aurora' }] }], { type: 'aurora' }]) {
    await checkStreamedDeltaEndsTheStream(t, guarded, ask, { content }, { finish: 'stop', label: JSON.stringify(content), hidden: /aurora|eve@|13912345678/, hiddenWhat: 'nothing of the part was sent' });
  }

  upstream.answer = {
    sse: [
      chatChunkEvent({ content: [{ type: '' }] }),
      chatChunkEvent({ content: [{ type: 'text', text: 'hello' }, { type: 'image_url', image_url: { url: 'https://img.example/a.png' } }, { type: 'video_url', video_url: { url: 'https://img.example/a.mp4' } }] }),
      chatChunkEvent({ content: [{ type: 'thinking', thinking: [{ type: 'text', text: 'hmm' }] }, { type: 'refusal', refusal: 'no' }] }),
      chatChunkEvent({}, 'stop'),
      SSE_DONE,
    ],
  };
  const { body } = await rawChatStream(node, node.secret, ask);
  t.notMatch(body, /ZN_ERR_GUARDRAIL/, 'an empty type carries no text, and no known part type was checked');
  t.match(body, /hello/);
  t.match(body, /"type":"image_url"/);
  t.match(body, /data: \[DONE\]\n\n$/);
});

t.test("a flag rule counts a match once in the type of a JSON answer's unknown tool call or content part, in an answer's or a request's tool_calls of an odd shape, and in a request's unknown part type", async (t) => {
  const { spool, matches } = recordedGuardrailMatches();
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'email', action: 'flag', on: 'both' }], { spool });

  for (const message of [
    { content: null, tool_calls: [{ id: 'call_0', type: 'to eve@example.org' }] },
    { content: [{ type: 'to eve@example.org' }] },
    { content: null, tool_calls: { to: 'eve@example.org' } },
    { content: null, tool_calls: ['to eve@example.org'] },
  ]) {
    upstream.answer = chatAnswerWith(message);
    const res = await postChat(node, node.secret, { messages: USER_GO });
    t.equal(res.status, 200);
    t.equal(await matches(res.requestId, 'output'), 1, JSON.stringify(message));
  }

  upstream.answer = OK;
  for (const message of [
    { role: 'assistant', content: null, tool_calls: ['to eve@example.org'] },
    { role: 'user', content: [{ type: 'to eve@example.org' }] },
  ]) {
    const res = await postChat(node, node.secret, { messages: [...USER_GO, message] });
    t.equal(res.status, 200);
    t.equal(await matches(res.requestId, 'input'), 1, JSON.stringify(message));
  }
});
