// The input token estimate of tool-call input (deferred-json-texts.ts), which credit
// pre-authorisation reserves against: a parsed input (or an `arguments` object sent in place of its
// JSON text) is estimated as the JSON it is sent as, every string, key, number, true, false, null
// and bracket at any depth, without serialising anything.
import t from 'tap';
import type { Test } from 'tap';
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
  t.equal(ctx.estimatedInputTokens, estimateTokens(JSON.stringify(nested(levels, leaf))), 'every key, brace and the deep string counted');
  resolveDeferredTexts(ctx.inputTexts);
  t.ok(isPartial(ctx.inputTexts), 'the walk itself still stops at its depth limit (guardrails with rules refuse it)');
  t.end();
});

t.test('an OpenAI `arguments` object is estimated by the JSON it is sent as, as a tool_use input is', (t) => {
  const args = { to: 'bob@example.com', list: ['alpha', { beta: 'gamma' }], n: 3 };
  const ctx = providerContext('chat.completions', {
    model: 'echo',
    messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c0', type: 'function', function: { name: 'send', arguments: args } }] }],
  });
  t.equal(chatCompletionsApi.identify(ctx), undefined);
  t.equal(ctx.estimatedInputTokens, estimateTokens(JSON.stringify(args)));
  resolveDeferredTexts(ctx.inputTexts);
  t.same(ctx.inputTexts.map((slot) => slot.text), ['bob@example.com', 'alpha', 'gamma', 'to', 'list', 'beta', 'n'], 'resolved: every string and key of the object');
  t.end();
});

/** The estimate of `input` as an Anthropic tool_use block's input, through the provider's identify. */
function toolUseEstimate(t: Test, input: unknown): number {
  const ctx = providerContext('messages', {
    model: 'claude',
    max_tokens: 10,
    messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 't0', name: 'send', input }] }],
  });
  t.equal(messagesApi.identify(ctx), undefined);
  return ctx.estimatedInputTokens;
}

t.test('a tool_use input of numbers, booleans or nulls is estimated by its JSON length, not as the one token of its key', (t) => {
  for (const item of [0, 123_456.75, true, false, null]) {
    const input = { data: new Array<unknown>(100_000).fill(item) };
    const json = JSON.stringify(input);
    const estimate = toolUseEstimate(t, input);
    t.equal(estimate, estimateTokens(json), `[${String(item)}, …]: ${json.length} characters of JSON`);
    t.ok(estimate >= json.length / 4, `[${String(item)}, …] reserves at least a token per 4 characters`);
  }
  t.end();
});

t.test('a small tool_use input stays as small as its JSON: a token or a few', (t) => {
  t.equal(toolUseEstimate(t, {}), 1, '{}');
  t.equal(toolUseEstimate(t, { ok: true, n: 12 }), estimateTokens('{"ok":true,"n":12}'), 'a boolean and a number');
  t.equal(toolUseEstimate(t, [null, false]), estimateTokens('[null,false]'), 'an array of scalars');
  t.ok(toolUseEstimate(t, { ok: true, n: 12 }) <= 5);
  t.end();
});

t.test('strings in an input are counted as JSON writes them: quoted, and a control character as its six-character escape', (t) => {
  const input = { text: '\u0001'.repeat(10_000), code: 'say("hi")\n'.repeat(1_000) };
  const estimate = toolUseEstimate(t, input);
  t.equal(estimate, estimateTokens(JSON.stringify(input)));
  t.ok(estimate >= (6 * 10_000 + 13 * 1_000) / 4, 'escapes counted at their JSON length');
  t.end();
});

t.test("OpenRouter's reasoning_details beside reasoning are estimated once; alone, they count", (t) => {
  const thought = 'the user asks for a summary of the quarterly figures, so I should '.repeat(20);
  const estimate = (assistant: Record<string, unknown>): number => {
    const ctx = providerContext('chat.completions', { model: 'echo', messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'ok', ...assistant }] });
    t.equal(chatCompletionsApi.identify(ctx), undefined);
    return ctx.estimatedInputTokens;
  };
  const details = [{ type: 'reasoning.text', text: thought, index: 0 }];
  const reasoningOnly = estimate({ reasoning: thought });
  t.ok(reasoningOnly > estimate({}), 'the reasoning counts');
  t.equal(estimate({ reasoning: thought, reasoning_details: details }), reasoningOnly, 'beside reasoning: not counted again');
  t.equal(estimate({ reasoning_content: thought, reasoning_details: details }), estimate({ reasoning_content: thought }), 'beside reasoning_content: the same');
  t.equal(estimate({ reasoning_details: details }), reasoningOnly, 'alone: they are the reasoning, and count');
  t.end();
});
