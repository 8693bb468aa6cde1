// An integer past 2^53 in a request body is forwarded digit for digit (withLongIntegersOf), while the
// parsed body the input rules walk holds it rounded: a Luhn-valid 19-digit card sent as a JSON number
// failed the checksum rounded and reached the upstream whole. Such integers are checked again as
// written: a block rule blocks, a mask rule blocks too (a number cannot carry a placeholder), and the
// record keeps no body; one that no rule matches goes on as sent.
import t from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { startGuardedNode } from './guarded-node.js';

const CARD_19 = '4111111111111111110';
const NOT_A_CARD = '9007199254740993';
const ANSWER = { id: 'c', object: 'chat.completion', created: 1, model: 'demo-echo', choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } };

async function postRaw(node: { baseURL: string; secret: string }, path: string, body: string): Promise<{ status: number; text: string; requestId: string | null }> {
  const res = await fetch(`${node.baseURL}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}`, 'anthropic-version': '2023-06-01' }, body });
  return { status: res.status, text: await res.text(), requestId: res.headers.get('x-request-id') };
}

function recordingSpool(): { spool: Record<string, unknown>; records: RequestRecord[] } {
  const records: RequestRecord[] = [];
  return { records, spool: { open: () => undefined, finalise: async (record: RequestRecord) => void records.push(record), keepsBodies: () => true, fullness: () => 0 } };
}

t.test('a 19-digit card sent as a JSON number under an input mask rule is blocked, never forwarded, and its body not recorded', async (t) => {
  const { spool, records } = recordingSpool();
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'bank-card', action: 'mask', on: 'input' }], { spool } as never);
  upstream.answer = { json: ANSWER };
  const tool = `{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"pay"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"pay","input":{"card":${CARD_19}}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"done"}]}]}`;
  const res = await postRaw(node, '/messages', tool);
  t.equal(res.status, 400);
  t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
  t.match(res.text, /an integer past 2\^53 in the request matches a mask rule, and a JSON number cannot be masked; send it as a string/);
  t.equal(upstream.requests.length, 0, 'nothing went upstream');
  const record = records.find((r) => r.requestId === res.requestId);
  t.equal(record?.bodies?.request ?? null, null, 'the record keeps no body holding the number');

  // In chat's metadata too (a field the node does not read, forwarded as sent).
  const chat = await postRaw(node, '/chat/completions', `{"model":"echo","messages":[{"role":"user","content":"hi"}],"metadata":{"ref":${CARD_19}}}`);
  t.equal(chat.status, 400);
  t.equal(upstream.requests.length, 0);
});

t.test('under a block rule it is blocked naming the rule; a long integer no rule matches is forwarded digit for digit', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'bank-card', action: 'block', on: 'input' }]);
  upstream.answer = { json: ANSWER };
  const blocked = await postRaw(node, '/chat/completions', `{"model":"echo","messages":[{"role":"user","content":"hi"}],"seed":${CARD_19}}`);
  t.equal(blocked.status, 400);
  t.match(blocked.text, /Blocked by guardrail policy \\"p\\" rule 0 \(bank-card\) on the input/);
  t.equal(upstream.requests.length, 0);
  const passed = await postRaw(node, '/chat/completions', `{"model":"echo","messages":[{"role":"user","content":"hi"}],"seed":${NOT_A_CARD}}`);
  t.equal(passed.status, 200);
  t.match(upstream.requests.at(-1)?.text, `"seed":${NOT_A_CARD}`);
});
