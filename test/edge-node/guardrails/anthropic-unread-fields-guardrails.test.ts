// On /v1/messages, text under keys the node's reading did not cover — a proxy's additions to the
// answer and its blocks (LiteLLM's provider_specific_fields), a `text` that is not a string (SDKs
// join an array into the text), strings beside a known delta's field, events of a type the node does
// not know, a citation location of a new type — is checked like the rest: masked in requests, JSON
// answers and whole stream events; a stream event that cannot be placed is blocked (fail closed).
import t from 'tap';
import { startGuardedNode } from './guarded-node.js';

const EMAIL = 'alice.leak@corp.test';
const RULES = [{ detector: 'email' as const, action: 'mask' as const, on: 'both' as const }];

function event(type: string, body: Record<string, unknown>): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`;
}
const START = event('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } });
const END = [event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 20 } }), event('message_stop', {})];
function block(start: Record<string, unknown>, deltas: Array<Record<string, unknown>>): string[] {
  return [event('content_block_start', { index: 0, content_block: start }), ...deltas.map((delta) => event('content_block_delta', { index: 0, delta })), event('content_block_stop', { index: 0 })];
}
const TEXT = (deltas: Array<Record<string, unknown>>): string[] => block({ type: 'text', text: '' }, deltas);

async function messages(node: { origin: string; secret: string }, body: Record<string, unknown>): Promise<{ status: number; text: string }> {
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': node.secret },
    body: JSON.stringify({ model: 'claude', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }], ...body }),
  });
  return { status: res.status, text: await res.text() };
}

const BLOCKED: Record<string, string[]> = {
  'a text_delta whose text is an array': [START, ...TEXT([{ type: 'text_delta', text: 'Mail ' }, { type: 'text_delta', text: [EMAIL] }]), ...END],
  'a text_delta with another string beside its text': [START, ...TEXT([{ type: 'text_delta', text: 'hi ', thinking: EMAIL }]), ...END],
  'a signature_delta carrying text': [START, ...block({ type: 'thinking', thinking: '' }, [{ type: 'thinking_delta', thinking: 'hm' }, { type: 'signature_delta', signature: 'EqQB', thinking: EMAIL }]), ...END],
  'an input_json_delta with text beside its JSON': [START, ...block({ type: 'tool_use', id: 'toolu_1', name: 'f', input: {} }, [{ type: 'input_json_delta', partial_json: '{"a":1}', text: EMAIL }]), ...END],
  'an event of a type the node does not know': [START, ...TEXT([{ type: 'text_delta', text: 'ok' }]), event('reasoning_summary', { text: EMAIL }), ...END],
  'a message_delta with text of its own': [START, ...TEXT([{ type: 'text_delta', text: 'ok' }]), event('message_delta', { delta: { stop_reason: 'end_turn', text: EMAIL }, usage: { output_tokens: 20 } }), event('message_stop', {})],
  'a content_block_stop carrying a block': [START, ...TEXT([{ type: 'text_delta', text: 'ok' }]).slice(0, 2), event('content_block_stop', { index: 0, content_block: { type: 'text', text: EMAIL } }), ...END],
  'a ping with text': [START, ...TEXT([{ type: 'text_delta', text: 'ok' }]), event('ping', { text: EMAIL }), ...END],
};

t.test('under an output rule, a stream event with text the node cannot place ends the stream blocked, none of it relayed', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  for (const [what, sse] of Object.entries(BLOCKED)) {
    upstream.answer = { sse };
    const res = await messages(node, { stream: true });
    t.notOk(res.text.includes(EMAIL), `${what}: the address never went out`);
    t.match(res.text, /event: error\ndata: .*ZN_ERR_GUARDRAIL_BLOCKED/, `${what}: blocked`);
  }
});

t.test('strings a stream event carries whole under other keys are masked in place', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  const cases: Record<string, string[]> = {
    'a message_start with provider_specific_fields': [
      event('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude', content: [], usage: { input_tokens: 5, output_tokens: 1 }, provider_specific_fields: { reasoning: EMAIL } } }),
      ...TEXT([{ type: 'text_delta', text: 'ok' }]),
      ...END,
    ],
    'a text block starting with another key': [START, ...block({ type: 'text', text: '', provider_specific_fields: { note: EMAIL } }, [{ type: 'text_delta', text: 'ok' }]), ...END],
    'a text block whose opening text is an array': [START, ...block({ type: 'text', text: [EMAIL] }, [{ type: 'text_delta', text: 'ok' }]), ...END],
    'a citation of a location type the node does not know': [START, ...TEXT([{ type: 'text_delta', text: 'a' }, { type: 'citations_delta', citation: { type: 'file_location', file_name: EMAIL, cited_text: 'x' } }]), ...END],
  };
  for (const [what, sse] of Object.entries(cases)) {
    upstream.answer = { sse };
    const res = await messages(node, { stream: true });
    t.notOk(res.text.includes(EMAIL), `${what}: the address never went out`);
    t.match(res.text, /alice\.leak|\[EMAIL\]/, `${what}: masked where it was`);
    t.notMatch(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/, `${what}: not blocked`);
  }
});

t.test('a JSON answer’s other keys, extra block keys, array text and unknown citation fields are masked', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  upstream.answer = {
    json: {
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: 'claude',
      content: [
        { type: 'text', text: 'ok', provider_specific_fields: { note: EMAIL }, citations: [{ type: 'file_location', file_name: EMAIL, cited_text: 'x' }] },
        { type: 'text', text: [EMAIL] },
        { type: 'thinking', thinking: 'hm', signature: 'sig', summary: EMAIL },
        { type: 'tool_use', id: 'toolu_1', name: 'f', input: {}, caller: { type: 'direct', note: EMAIL } },
      ],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: 5, output_tokens: 7 },
      provider_specific_fields: { reasoning: EMAIL },
    },
  };
  const res = await messages(node, {});
  t.equal(res.status, 200, res.text);
  t.notOk(res.text.includes(EMAIL), 'no field carries the address');
  const answer = JSON.parse(res.text) as { provider_specific_fields: unknown; content: Array<Record<string, unknown>> };
  t.same(answer.provider_specific_fields, { reasoning: '[EMAIL]' });
  t.same(answer.content[0]!.provider_specific_fields, { note: '[EMAIL]' });
  t.same(answer.content[1]!.text, ['[EMAIL]']);
  t.equal(answer.content[2]!.signature, 'sig', 'opaque keys are left as they were');
});

t.test('a request’s other message keys and extra block keys are masked before they go upstream', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  upstream.answer = { json: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude', content: [{ type: 'text', text: 'ok' }], stop_reason: 'end_turn', usage: { input_tokens: 5, output_tokens: 1 } } };
  const res = await messages(node, {
    messages: [
      { role: 'user', content: [{ type: 'text', text: 'hi', note: EMAIL }] },
      { role: 'assistant', content: 'noted', provider_specific_fields: { mail: EMAIL } },
      { role: 'user', content: 'thanks' },
    ],
  });
  t.equal(res.status, 200, res.text);
  const forwarded = upstream.requests.at(-1)!.text;
  t.notOk(forwarded.includes(EMAIL), 'nothing unmasked forwarded');
  t.match(forwarded, /"note":"\[EMAIL\]"/);
  t.match(forwarded, /"provider_specific_fields":\{"mail":"\[EMAIL\]"\}/);
});

t.test('a tool_use block start with Anthropic’s caller (programmatic tool calling) is relayed, not blocked', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  upstream.answer = { sse: [START, ...block({ type: 'tool_use', id: 'toolu_1', name: 'f', input: {}, caller: { type: 'code_execution_20250825', tool_id: 'srvtoolu_01ABC' } }, [{ type: 'input_json_delta', partial_json: '{"a":1}' }]), ...END] };
  const res = await messages(node, { stream: true });
  t.notMatch(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
  t.match(res.text, /srvtoolu_01ABC/);
});
