// The walk over tool-call input (json-string-slots.ts) and its deferral (deferred-json-texts.ts),
// with the real detectors and guardrail stages: key renaming stays linear, JSON text is checked as
// it will be read (duplicate keys, string literals, text that is not JSON), and the walk waits
// until a direction has rules.
import t from 'tap';
import { applyPolicy, requestPolicy } from '../../../edge-node/src/guardrails/policy-engine.js';
import type { TextSlot } from '../../../edge-node/src/pipeline/context.js';
import { guardrailsInStage } from '../../../edge-node/src/pipeline/stages/guardrails-in.js';
import { guardrailsOutStage } from '../../../edge-node/src/pipeline/stages/guardrails-out.js';
import { messagesApi } from '../../../edge-node/src/providers/anthropic/messages.js';
import { deferJsonText, resolveDeferredTexts } from '../../../edge-node/src/providers/deferred-json-texts.js';
import { JsonStringWalk, jsonTextOf } from '../../../edge-node/src/providers/json-string-slots.js';
import { chatCompletionsApi } from '../../../edge-node/src/providers/openai/chat-completions.js';
import { estimateTokens } from '../../../edge-node/src/providers/token-estimate.js';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { ESCAPED_TOOL_SECRET, TOOL_RULES, TOOL_SECRET, guardContext, policy, providerContext } from './guardrail-fixtures.js';


/** `text` as a tool call's arguments, checked with TOOL_RULES' input side: the rejection (if any) and the arguments that go on. */
function checkArguments(text: string): { blocked: string | undefined; out: string } {
  const holder: Record<string, unknown> = { arguments: text };
  const walk = new JsonStringWalk();
  walk.addJsonText(holder, 'arguments');
  const slots = walk.finish();
  const { ctx } = guardContext({ policies: [policy('p', TOOL_RULES)], policyId: 'p' });
  const rejection = applyPolicy(ctx, requestPolicy(ctx)!, 'input', slots);
  return { blocked: rejection?.error.code, out: jsonTextOf(holder, 'arguments') };
}

/** Runs `fn` counting JSON.parse calls on exactly `text`. */
function parsesOf(text: string, fn: () => void): number {
  const parse = JSON.parse;
  let count = 0;
  JSON.parse = ((source: string, reviver?: Parameters<typeof JSON.parse>[1]) => {
    if (source === text) count += 1;
    return parse(source, reviver) as unknown;
  }) as typeof JSON.parse;
  try {
    fn();
  } finally {
    JSON.parse = parse;
  }
  return count;
}

t.test('masking 20 000 object keys to one placeholder renames each one distinctly, with a number of key probes linear in the keys', (t) => {
  const KEYS = 20_000;
  const object: Record<string, number> = {};
  for (let i = 0; i < KEYS; i += 1) object[`u${i}@example.com`] = i;
  const holder: Record<string, unknown> = { arguments: JSON.stringify(object) };
  const walk = new JsonStringWalk();
  walk.addJsonText(holder, 'arguments');
  const slots = walk.finish();
  const { ctx } = guardContext({ policies: [policy('p', TOOL_RULES)], policyId: 'p' });
  const compiled = requestPolicy(ctx)!;
  // Counted, and cut short well before a quadratic renaming (≈ KEYS² / 2 probes) would finish.
  const hasOwn = Object.hasOwn;
  const budget = 4 * KEYS;
  let probes = 0;
  Object.hasOwn = (target: object, key: PropertyKey): boolean => {
    probes += 1;
    if (probes > budget) throw new Error(`more than ${budget} key probes for ${KEYS} keys`);
    return hasOwn(target, key);
  };
  try {
    t.equal(applyPolicy(ctx, compiled, 'input', slots), undefined);
  } finally {
    Object.hasOwn = hasOwn;
  }
  t.ok(probes <= budget, `${probes} probes`);
  const renamed = JSON.parse(jsonTextOf(holder, 'arguments')) as Record<string, number>;
  const names = Object.keys(renamed);
  t.equal(names.length, KEYS, 'no key was lost');
  t.equal(names[0], '[EMAIL]');
  t.equal(names[1], '[EMAIL] (2)');
  t.equal(names[KEYS - 1], `[EMAIL] (${KEYS})`);
  t.equal(new Set(names).size, KEYS, 'every key has a name of its own');
  t.same(Object.values(renamed).slice(0, 3), [0, 1, 2], 'each value stays with its key');
  t.end();
});

t.test('a numbered name already taken is skipped, and the names keep counting on from it', (t) => {
  const { out } = checkArguments(JSON.stringify({ 'a@example.com': 1, '[EMAIL]': 2, '[EMAIL] (2)': 3, 'b@example.com': 4, 'c@example.com': 5 }));
  t.same(JSON.parse(out), { '[EMAIL]': 2, '[EMAIL] (2)': 3, '[EMAIL] (3)': 1, '[EMAIL] (4)': 4, '[EMAIL] (5)': 5 });
  t.end();
});

t.test('arguments with a duplicate key go on as the value that was checked (the last one), not as their raw text', (t) => {
  const hidden = checkArguments('{"q":"project aurora","q":"x"}');
  t.equal(hidden.blocked, undefined, 'the value JSON.parse keeps passes');
  t.equal(hidden.out, '{"q":"x"}', 'the text holding the unchecked value is not forwarded');
  const nested = checkArguments('{"a":{"to":"bob@example.com","to":"x"},"b":["\\"q\\""]}');
  t.equal(nested.out, '{"a":{"to":"x"},"b":["\\"q\\""]}');
  // Escaped quotes, backslashes and whitespace do not confuse the count: no duplicate, no rewrite.
  const plain = '{ "k\\"ey" : "v\\\\", "arr": ["a", "b\\"", {"c": "caf\\u00e9"}], "n": 1 }';
  t.equal(checkArguments(plain).out, plain, 'arguments without duplicates or matches stay byte for byte');
  const checked = checkArguments('{"q":"x","q":"project aurora"}');
  t.equal(checked.blocked, 'ZN_ERR_GUARDRAIL_BLOCKED', 'the last value is checked');
  t.end();
});

t.test('arguments that are a JSON string literal are checked decoded, and re-serialised when masked', (t) => {
  const blocked = checkArguments(JSON.stringify(`key ${TOOL_SECRET}`).replace('A', '\\u0041'));
  t.equal(blocked.blocked, 'ZN_ERR_GUARDRAIL_BLOCKED', 'an escape does not hide the secret');
  const masked = checkArguments('"mail bob\\u0040example.com"');
  t.equal(masked.blocked, undefined);
  t.equal(JSON.parse(masked.out), 'mail [EMAIL]', 'the masked string is still a JSON string');
  const untouched = '"caf\\u00e9"';
  t.equal(checkArguments(untouched).out, untouched, 'a literal nothing masked stays byte for byte');
  t.end();
});

t.test('arguments that are not JSON (cut short) are checked with their JSON escapes decoded, and a mask writes the decoded text', (t) => {
  t.equal(checkArguments(`{"q":"key ${ESCAPED_TOOL_SECRET}`).blocked, 'ZN_ERR_GUARDRAIL_BLOCKED');
  t.equal(checkArguments('{"to":"bob\\u0040example.com", "body":"line\\none').out, '{"to":"[EMAIL]", "body":"line\none');
  const untouched = '{"to":"caf\\u00e9 \\q \\u12';
  t.equal(checkArguments(untouched).out, untouched, 'without a match the text stays as it came, odd escapes and all');
  t.end();
});

t.test('numbers inside arguments are checked as their digits, a card past 2^53 too, and a mask turns them into the placeholder string', (t) => {
  const rules: GuardrailRule[] = [
    { detector: 'bank-card', action: 'mask', on: 'input' },
    { detector: 'phone', action: 'block', on: 'input' },
  ];
  const check = (text: string) => {
    const holder: Record<string, unknown> = { arguments: text };
    const walk = new JsonStringWalk();
    walk.addJsonText(holder, 'arguments');
    const { ctx } = guardContext({ policies: [policy('n', rules)], policyId: 'n' });
    const rejection = applyPolicy(ctx, requestPolicy(ctx)!, 'input', walk.finish());
    return { blocked: rejection?.error.code, out: jsonTextOf(holder, 'arguments') };
  };
  t.same(JSON.parse(check('{"card":4111111111111111,"n":[1,2]}').out), { card: '[BANK_CARD]', n: [1, 2] }, 'a 16-digit card number');
  // 6212345678901234569 is a Luhn-valid 19-digit card that a double rounds to …4000.
  t.same(JSON.parse(check('{"pay":{"card":6212345678901234569}}').out), { pay: { card: '[BANK_CARD]' } }, 'a 19-digit card, read from the text, not the rounded double');
  t.equal(check('[13812345678]').blocked, 'ZN_ERR_GUARDRAIL_BLOCKED', 'a phone number as a number');
  const plain = '{"id":1234567890123456789,"price":12.5,"big":-98765432109876543210e3,"ids":[100000,7]}';
  t.equal(check(plain).out, plain, 'numbers nothing matched stay byte for byte, long ones included');
  const many = JSON.stringify({ v: Array.from({ length: 60_000 }, (_, i) => i % 1000) });
  t.equal(check(many).blocked, undefined, 'short numbers take nothing from the walk budget: 60 000 of them do not make it fail closed');
  t.end();
});

t.test("identify parses no tool-call arguments and walks no tool input for guardrails; the input estimate counts the raw arguments and the input's JSON", (t) => {
  const args = '{"path": "src/a.ts", "note": "mail bob@example.com"}';
  const chat = providerContext('chat.completions', {
    model: 'echo',
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c0', type: 'function', function: { name: 'edit', arguments: args } }] },
      { role: 'tool', tool_call_id: 'c0', content: 'ok' },
    ],
  });
  t.equal(parsesOf(args, () => chatCompletionsApi.identify(chat)), 0, 'the arguments are not parsed');
  t.same(chat.inputTexts.map((slot) => slot.text), ['hi', args, 'ok'], 'the arguments are one text until rules need their strings');
  t.equal(chat.estimatedInputTokens, estimateTokens('hi') + estimateTokens(args) + estimateTokens('ok'), 'estimated from the raw arguments');

  const input = { to: 'bob@example.com', list: ['alpha', { beta: 'gamma' }], n: 3 };
  const messages = providerContext('messages', {
    model: 'claude',
    max_tokens: 10,
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 't0', name: 'send', input }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't0', content: 'ok' }] },
    ],
  });
  t.equal(messagesApi.identify(messages), undefined);
  t.equal(messages.inputTexts.length, 3, 'the input is one stand-in, not a slot per string');
  t.equal(messages.estimatedInputTokens, estimateTokens('hi') + estimateTokens('ok') + estimateTokens(JSON.stringify(input)), 'the input as the JSON it is sent as');
  resolveDeferredTexts(messages.inputTexts);
  t.same(messages.inputTexts.map((slot) => slot.text), ['hi', 'bob@example.com', 'alpha', 'gamma', 'ok', 'to', 'list', 'beta', 'n'], 'resolved: every string and key of the input');
  t.end();
});

t.test('the guardrail stages walk deferred tool input only for a direction with rules, and fail closed on it before checking', async (t) => {
  const args = '{"to": "bob@example.com"}';
  const body = (callArgs: string) => ({
    model: 'echo',
    messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c0', type: 'function', function: { name: 'send', arguments: callArgs } }] }],
  });
  const identified = (callArgs: string): TextSlot[] => {
    const ctx = providerContext('chat.completions', body(callArgs));
    chatCompletionsApi.identify(ctx);
    return ctx.inputTexts;
  };
  const outputOnly = policy('out', [{ detector: 'email', action: 'mask', on: 'output' }]);
  const inputRules = policy('in', [{ detector: 'email', action: 'mask', on: 'input' }]);

  await t.test('without input rules nothing is parsed', async (t) => {
    const { ctx } = guardContext({ policies: [outputOnly], policyId: 'out', inputTexts: identified(args) });
    t.equal(parsesOf(args, () => void guardrailsInStage.run(ctx)), 0);
    t.same(ctx.inputTexts.map((slot) => slot.text), [args]);
  });

  await t.test('with input rules the strings inside are checked and masked', async (t) => {
    const { ctx } = guardContext({ policies: [inputRules], policyId: 'in', inputTexts: identified(args) });
    t.equal(await guardrailsInStage.run(ctx), undefined);
    t.same(ctx.inputTexts.map((slot) => slot.text), ['[EMAIL]', 'to']);
  });

  let deep = '"x"';
  for (let i = 0; i < 70; i += 1) deep = `[${deep}]`;
  await t.test('input nested deeper than the walk goes is blocked as unchecked, not passed', async (t) => {
    const { ctx } = guardContext({ policies: [inputRules], policyId: 'in', inputTexts: identified(deep) });
    const result = await guardrailsInStage.run(ctx);
    t.equal(result?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.match(result?.error.message, /more text than guardrails check/);
  });

  await t.test('a JSON answer nested deeper than the walk goes is blocked as unchecked under output rules', async (t) => {
    const call = { name: 'f', arguments: deep };
    const answer = { choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ id: 'c0', type: 'function', function: call }] } }] };
    const texts: TextSlot[] = [];
    deferJsonText(texts, call, 'arguments');
    const { ctx } = guardContext({ policies: [outputOnly], policyId: 'out', reply: { kind: 'json', status: 200, headers: {}, body: answer, texts } });
    const result = await guardrailsOutStage.run(ctx);
    t.equal(result?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  });
});
