// Anthropic bills the tokens of an advisor tool's model and of a server-side compaction step in
// `usage.iterations` only, outside the top-level usage the node charges: a priced /v1/messages
// request with an `advisor_…` tool or a `compact_…` context-management edit is refused with
// ZN_ERR_INVALID_REQUEST naming it, before anything is reserved or forwarded (docs/billing.md).
import t from 'tap';
import { json, startScriptedUpstreamNode } from './scripted-upstream-node.js';

const answer = json({
  id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [{ type: 'text', text: 'ok' }],
  stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 20, output_tokens: 5 },
});
const messages = [{ role: 'user', content: 'Plan this.' }];

const REFUSED: Array<[string, Record<string, unknown>, string]> = [
  ['an advisor tool', { tools: [{ name: 'lookup', input_schema: { type: 'object' } }, { type: 'advisor_20260301', name: 'advisor', model: 'claude-opus-4-7' }] }, 'tools[1].type'],
  ['a compaction edit', { context_management: { edits: [{ type: 'clear_tool_uses_20250919' }, { type: 'compact_20260112' }] } }, 'context_management.edits[1].type'],
];

t.test('a priced messages request with an advisor tool or a compaction edit is refused before anything is reserved or forwarded', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  node.answer(answer);
  for (const [what, request, param] of REFUSED) {
    const { status, text, record } = await node.post('/v1/messages', { model: 'claude', max_tokens: 100, messages, ...request });
    t.equal(status, 400, `${what}: refused`);
    t.match(text, 'ZN_ERR_INVALID_REQUEST', `${what}: invalid request`);
    t.match(text, `${param}:`, `${what}: names ${param}`);
    t.equal(record.cost.reservedMicros, 0, `${what}: nothing reserved`);
  }
  t.equal(node.calls(), 0, 'nothing forwarded');
});

t.test('a priced messages request with client tools and a tool-use clearing edit is forwarded', async (t) => {
  const node = await startScriptedUpstreamNode(t);
  node.answer(answer);
  const { status } = await node.post('/v1/messages', {
    model: 'claude', max_tokens: 100, messages,
    tools: [{ name: 'lookup', input_schema: { type: 'object' } }, { type: 'bash_20250124', name: 'bash' }],
    context_management: { edits: [{ type: 'clear_tool_uses_20250919' }] },
  });
  t.equal(status, 200);
  t.equal(node.calls(), 1);
});
