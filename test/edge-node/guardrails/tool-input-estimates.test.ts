// The input token estimate of tool-call input (deferred-json-texts.ts), which credit
// pre-authorisation reserves against: it counts every string and key, at any depth, and an
// `arguments` object sent in place of its JSON text by its strings, without serialising anything.
import t from 'tap';
import { messagesApi } from '../../../edge-node/src/providers/anthropic/messages.js';
import { resolveDeferredTexts } from '../../../edge-node/src/providers/deferred-json-texts.js';
import { MAX_DEPTH } from '../../../edge-node/src/providers/json-string-slots.js';
import { chatCompletionsApi } from '../../../edge-node/src/providers/openai/chat-completions.js';
import { isPartial } from '../../../edge-node/src/providers/partial-texts.js';
import { estimateTokens } from '../../../edge-node/src/providers/token-estimate.js';
import { providerContext } from './guardrail-fixtures.js';

/** `{"n":{"n":…{"s": leaf}}}`, `levels` objects deep. */
function nested(levels: number, leaf: string): Record<string, unknown> {
  const root: Record<string, unknown> = {};
  let node = root;
  for (let i = 1; i < levels; i += 1) {
    const next: Record<string, unknown> = {};
    node.n = next;
    node = next;
  }
  node.s = leaf;
  return root;
}

t.test("a tool_use input's estimate counts strings nested deeper than the walk goes (a 1 MB string 70 levels down is not free)", (t) => {
  const leaf = 'y'.repeat(1_000_000);
  const levels = MAX_DEPTH + 6;
  const ctx = providerContext('messages', {
    model: 'claude',
    max_tokens: 10,
    messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 't0', name: 'send', input: nested(levels, leaf) }] }],
  });
  t.equal(messagesApi.identify(ctx), undefined);
  t.equal(ctx.estimatedInputTokens, (levels - 1) * estimateTokens('n') + estimateTokens('s') + estimateTokens(leaf), 'every key and the deep string counted');
  resolveDeferredTexts(ctx.inputTexts);
  t.ok(isPartial(ctx.inputTexts), 'the walk itself still stops at its depth limit (guardrails with rules refuse it)');
  t.end();
});

t.test('an OpenAI `arguments` object is estimated by its strings and keys, as a tool_use input is', (t) => {
  const args = { to: 'bob@example.com', list: ['alpha', { beta: 'gamma' }], n: 3 };
  const ctx = providerContext('chat.completions', {
    model: 'echo',
    messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c0', type: 'function', function: { name: 'send', arguments: args } }] }],
  });
  t.equal(chatCompletionsApi.identify(ctx), undefined);
  const strings = ['to', 'bob@example.com', 'list', 'alpha', 'beta', 'gamma', 'n'];
  t.equal(ctx.estimatedInputTokens, strings.reduce((sum, s) => sum + estimateTokens(s), 0));
  resolveDeferredTexts(ctx.inputTexts);
  t.same(ctx.inputTexts.map((slot) => slot.text), ['bob@example.com', 'alpha', 'gamma', 'to', 'list', 'beta', 'n'], 'resolved: every string and key of the object');
  t.end();
});
