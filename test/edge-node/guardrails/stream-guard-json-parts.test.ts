// Output guardrails over JSON parts of a stream (tool-call arguments held whole) fail closed where
// they cannot check everything: arguments held beyond the bound (one call's, or all held calls' in
// total), nested deeper than the string walk follows, or going on after the call ended, end the
// stream with ZN_ERR_GUARDRAIL_BLOCKED instead of passing unchecked; a choice's tool calls are held
// one after another (each released when the next starts); and a tool call's arguments, its
// choice's content and its reasoning are separate texts.
import t from 'tap';
import { MAX_HELD_JSON_CHARS } from '../../../edge-node/src/guardrails/stream-guard.js';
import { MAX_DEPTH } from '../../../edge-node/src/providers/json-string-slots.js';
import { bundleKey } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import { policy } from './guardrail-fixtures.js';
import { sseData, startScriptedUpstream } from './scripted-upstream.js';

const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const args = (index: number, text: string): string => chunk({ tool_calls: [{ index, function: { arguments: text } }] });
/** A chunk of choice `choice` carrying a fragment of its tool call 0. */
const choiceArgs = (choice: number, text: string): string =>
  `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: choice, delta: { tool_calls: [{ index: 0, function: { arguments: text } }] }, finish_reason: null }] })}\n\n`;
type Delta = { tool_calls?: Array<{ index: number; function: { arguments: string } }> };
const deltasOf = (body: string): Delta[] =>
  sseData(body).filter((d) => d !== '[DONE]').map((d) => (JSON.parse(d) as { choices: Array<{ delta: Delta }> }).choices[0]!.delta);

t.test('JSON parts of a guarded stream', async (t) => {
  const upstream = await startScriptedUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (_base, hash) => ({
      apiKeys: [bundleKey('key-a', hash, { guardrailPolicyId: 'p' })],
      guardrailPolicies: [policy('p', [{ detector: 'keywords', keywords: ['project-aurora'], action: 'mask', on: 'output' }])],
    }),
  });
  const stream = async (events: string[]): Promise<string> => {
    upstream.answer = { sse: [...events, 'data: [DONE]\n\n'] };
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
      body: JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    return res.text();
  };

  await t.test('tool-call arguments longer than the hold bound end the stream blocked, none of them sent', async (t) => {
    const piece = 'x'.repeat(64 * 1024);
    const events = [args(0, '{"a":"')];
    for (let sent = 0; sent <= MAX_HELD_JSON_CHARS; sent += piece.length) events.push(args(0, piece));
    events.push(args(0, '"}'), chunk({}, 'tool_calls'));
    const body = await stream(events);
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /xxxx/, 'no fragment went out');
    t.notMatch(body, /\[DONE\]/);
  });

  await t.test('tool-call arguments nested deeper than the walk follows end the stream blocked', async (t) => {
    const deep = '['.repeat(MAX_DEPTH + 1) + '"project-aurora"' + ']'.repeat(MAX_DEPTH + 1);
    const body = await stream([args(0, deep), chunk({}, 'tool_calls')]);
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /project-aurora/);
  });

  await t.test("a match split between a tool call's arguments and its choice's content or another tool call is no match: they are separate texts", async (t) => {
    const body = await stream([
      chunk({ content: 'project-' }),
      args(0, '{"k":"aurora project-"}'),
      chunk({ reasoning_content: 'aurora' }),
      args(1, '{"k":"aurora"}'),
      chunk({ content: 'aurora' }),
      chunk({}, 'stop'),
    ]);
    const deltas = sseData(body).filter((d) => d !== '[DONE]').map((d) => (JSON.parse(d) as { choices: Array<{ delta: Record<string, unknown> }> }).choices[0]!.delta);
    t.equal(deltas.map((d) => (d.content as string | undefined) ?? '').join(''), '[REDACTED]', 'the content is one text around the other parts: its halves make one match');
    const argsOf = (index: number): string => deltas.flatMap((d) => ((d.tool_calls as Array<{ index: number; function: { arguments: string } }> | undefined) ?? []).filter((c) => c.index === index).map((c) => c.function.arguments)).join('');
    t.equal(argsOf(0), '{"k":"aurora project-"}');
    t.equal(argsOf(1), '{"k":"aurora"}');
    t.equal(deltas.map((d) => (d.reasoning_content as string | undefined) ?? '').join(''), 'aurora');
  });

  await t.test('when the chunk that finishes the choice carries the last fragment, the whole arguments go out in it', async (t) => {
    const last = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: 'ora"}' } }] }, finish_reason: 'tool_calls' }] })}\n\n`;
    const body = await stream([chunk({ tool_calls: [{ index: 0, id: 'call_0', type: 'function', function: { name: 'f', arguments: '{"k":"project-aur' } }] }), last]);
    const choices = sseData(body).filter((d) => d !== '[DONE]').map((d) => (JSON.parse(d) as { choices: Array<{ delta: { tool_calls?: Array<{ function: { arguments: string } }> }; finish_reason: string | null }> }).choices[0]!);
    t.same(choices.map((c) => c.delta.tool_calls?.[0]?.function.arguments), ['', '{"k":"[REDACTED]"}']);
    t.same(choices.map((c) => c.finish_reason), [null, 'tool_calls']);
  });

  await t.test('tool calls held at once beyond the bound in total end the stream blocked, though each is under it', async (t) => {
    // Three choices each hold one call of 40% of the bound: 120% in all, none of them ended.
    const piece = 'x'.repeat(Math.ceil((MAX_HELD_JSON_CHARS * 0.4) / 4));
    const events = [0, 1, 2].flatMap((choice) => [choiceArgs(choice, '{"a":"'), ...Array.from({ length: 4 }, () => choiceArgs(choice, piece))]);
    events.push(...[0, 1, 2].map((choice) => `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: choice, delta: { tool_calls: [{ index: 0, function: { arguments: '"}' } }] }, finish_reason: 'tool_calls' }] })}\n\n`));
    const body = await stream(events);
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /xxxx/, 'no fragment went out');
  });

  await t.test("a choice's tool calls are held one at a time: calls over the bound in total pass when each was released as the next started", async (t) => {
    const piece = 'x'.repeat(Math.ceil(MAX_HELD_JSON_CHARS * 0.4));
    const body = await stream([args(0, `{"a":"${piece}"}`), args(1, `{"a":"${piece}"}`), args(2, `{"a":"${piece} project-aurora"}`), chunk({}, 'tool_calls')]);
    t.notMatch(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    const whole = deltasOf(body).flatMap((d) => d.tool_calls ?? []).filter((c) => c.function.arguments !== '');
    t.same(whole.map((c) => [c.index, c.function.arguments.length]), [[0, piece.length + 8], [1, piece.length + 8], [2, piece.length + 19]]);
    t.match(whole[2]!.function.arguments, /\[REDACTED\]"\}$/);
  });

  await t.test("more arguments of a tool call after the next call started end the stream blocked: they could not be checked with the call's start", async (t) => {
    const body = await stream([args(0, '{"k":"project-'), args(1, '{}'), args(0, 'aurora"}'), chunk({}, 'tool_calls')]);
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /aurora/);
  });

  await t.test('tool calls whose ids and names all come before their arguments are each checked and sent whole', async (t) => {
    const heads = chunk({ tool_calls: [0, 1].map((index) => ({ index, id: `call_${index}`, type: 'function', function: { name: 'f', arguments: '' } })) });
    const body = await stream([heads, args(0, '{"k":"project-'), args(0, 'aurora"}'), args(1, '{"k":"project-'), args(1, 'aurora"}'), chunk({}, 'tool_calls')]);
    t.notMatch(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    const whole = deltasOf(body).flatMap((d) => d.tool_calls ?? []).filter((c) => c.function.arguments !== '');
    t.same(whole.map((c) => [c.index, c.function.arguments]), [[0, '{"k":"[REDACTED]"}'], [1, '{"k":"[REDACTED]"}']]);
  });

  await t.test('when one chunk carries fragments of two tool calls, the first call goes out whole in its own fragment of that chunk, before the second', async (t) => {
    const both = chunk({ tool_calls: [{ index: 0, function: { arguments: 'ora"}' } }, { index: 1, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"k":"x"}' } }] });
    const body = await stream([args(0, '{"k":"project-aur'), both, chunk({}, 'tool_calls')]);
    const deltas = deltasOf(body);
    t.same(deltas.map((d) => (d.tool_calls ?? []).map((c) => [c.index, c.function.arguments])), [[[0, '']], [[0, '{"k":"[REDACTED]"}'], [1, '']], [[1, '{"k":"x"}']], []]);
  });
});
