// The guardrail stages over whole texts: each action on input and on output, verdicts without the
// matched text, direction filters, overlapping masks, fail-closed policies and the compile cache.
import t from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import { guardrailsInStage } from '../../../edge-node/src/pipeline/stages/guardrails-in.js';
import { guardrailsOutStage } from '../../../edge-node/src/pipeline/stages/guardrails-out.js';
import type { TextSlot, UpstreamReply } from '../../../edge-node/src/pipeline/context.js';
import { guardContext, openAiStream, policy } from './guardrail-fixtures.js';

const PII = 'Mail zhang.san@example.com or call 13800138000 about card 4111 1111 1111 1111.';

function jsonReply(texts: TextSlot[]): UpstreamReply {
  return { kind: 'json', status: 200, headers: {}, body: {}, texts };
}

t.test('a key without a policy passes untouched and records nothing', async (t) => {
  const p = policy('p1', [{ detector: 'email', action: 'block' }]);
  const { ctx } = guardContext({ policies: [p], policyId: null, inputTexts: [{ text: PII }] });
  t.equal(await guardrailsInStage.run(ctx), undefined);
  t.equal(ctx.inputTexts[0]!.text, PII);
  t.same(ctx.guardrails, []);
});

t.test('mask on input rewrites each match with its placeholder and records one verdict per rule', async (t) => {
  const p = policy('pii', [
    { detector: 'email', action: 'mask' },
    { detector: 'phone', action: 'mask' },
    { detector: 'bank-card', action: 'mask' },
  ]);
  const texts = [{ text: PII }, { text: '另一个邮箱 li@example.org。' }, { text: '' }];
  const { ctx } = guardContext({ policies: [p], policyId: 'pii', inputTexts: texts });
  t.equal(await guardrailsInStage.run(ctx), undefined);
  t.equal(texts[0]!.text, 'Mail [EMAIL] or call [PHONE] about card [BANK_CARD].');
  t.equal(texts[1]!.text, '另一个邮箱 [EMAIL]。');
  t.same(ctx.guardrails, [
    { policyId: 'pii', rule: 0, detector: 'email', action: 'mask', on: 'input', matches: 2 },
    { policyId: 'pii', rule: 1, detector: 'phone', action: 'mask', on: 'input', matches: 1 },
    { policyId: 'pii', rule: 2, detector: 'bank-card', action: 'mask', on: 'input', matches: 1 },
  ]);
  t.notMatch(JSON.stringify(ctx.guardrails), /example|13800138000|4111/, 'verdicts never carry the matched text');
});

t.test('block on input refuses the request naming rule and detector, never the text', async (t) => {
  const p = policy('strict', [
    { detector: 'email', action: 'flag' },
    { detector: 'secret', action: 'block' },
  ]);
  const secret = 'sk-proj-Abc123Def456Ghi789Jkl0';
  const texts = [{ text: `here is my key ${secret}` }, { text: 'and mail ops@example.com' }];
  const { ctx } = guardContext({ policies: [p], policyId: 'strict', inputTexts: texts });
  const result = await guardrailsInStage.run(ctx);
  t.equal(result?.kind, 'rejection');
  t.equal(result?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  t.equal(result?.error.status, 400);
  t.match(result?.error.message, /policy "strict" rule 1 \(secret\)/);
  t.notMatch(result?.error.message, /sk-proj/);
  t.same(ctx.guardrails, [
    { policyId: 'strict', rule: 1, detector: 'secret', action: 'block', on: 'input', matches: 1 },
    { policyId: 'strict', rule: 0, detector: 'email', action: 'flag', on: 'input', matches: 1 },
  ], 'every text is still checked, so the verdicts are complete');
  t.equal(texts[0]!.text, 'here is my key [SECRET]', 'the blocked text is masked in the body a record may keep');
  t.equal(texts[1]!.text, 'and mail ops@example.com', 'flagged text stays');
});

t.test('flag records a verdict and leaves the text as it is', async (t) => {
  const p = policy('watch', [{ detector: 'keywords', keywords: ['Project Phoenix'], action: 'flag' }]);
  const texts = [{ text: 'Status of project phoenix? And PROJECT PHOENIX again.' }];
  const { ctx } = guardContext({ policies: [p], policyId: 'watch', inputTexts: texts });
  t.equal(await guardrailsInStage.run(ctx), undefined);
  t.equal(texts[0]!.text, 'Status of project phoenix? And PROJECT PHOENIX again.');
  t.same(ctx.guardrails, [{ policyId: 'watch', rule: 0, detector: 'keywords', action: 'flag', on: 'input', matches: 2 }]);
});

t.test('rules apply only in their direction', async (t) => {
  const p = policy('dir', [
    { detector: 'email', action: 'block', on: 'output' },
    { detector: 'phone', action: 'mask', on: 'input' },
  ]);
  const input = [{ text: PII }];
  const { ctx } = guardContext({ policies: [p], policyId: 'dir', inputTexts: input });
  t.equal(await guardrailsInStage.run(ctx), undefined, 'the output-only block rule does not see the input');
  t.equal(input[0]!.text, 'Mail zhang.san@example.com or call [PHONE] about card 4111 1111 1111 1111.');
  const output = [{ text: 'reply to 13800138000 or a@example.com' }];
  ctx.reply = jsonReply(output);
  const result = await guardrailsOutStage.run(ctx);
  t.equal(result?.kind === 'rejection' ? result.error.code : undefined, 'ZN_ERR_GUARDRAIL_BLOCKED');
  t.match(result?.error.message, /rule 0 \(email\) on the output/);
  t.same(ctx.guardrails.map((v) => [v.rule, v.on]), [[1, 'input'], [0, 'output']]);
});

t.test('mask on a JSON answer rewrites the delivered texts', async (t) => {
  const p = policy('out', [{ detector: 'prc-resident-id', action: 'mask', on: 'output' }, { detector: 'regex', pattern: '(?i)order-\\d{4}', action: 'mask' }]);
  const texts = [{ text: '您的身份证号 11010519491231002X，订单 ORDER-1234。' }];
  const { ctx } = guardContext({ policies: [p], policyId: 'out', reply: jsonReply(texts) });
  t.equal(await guardrailsOutStage.run(ctx), undefined);
  t.equal(texts[0]!.text, '您的身份证号 [PRC_ID]，订单 [REDACTED]。');
  t.same(ctx.guardrails.map((v) => [v.detector, v.on, v.matches]), [['prc-resident-id', 'output', 1], ['regex', 'output', 1]]);
});

t.test('overlapping masks from two rules become one placeholder, and each rule counts its match', async (t) => {
  const p = policy('overlap', [{ detector: 'email', action: 'mask' }, { detector: 'keywords', keywords: ['example'], action: 'mask' }]);
  const texts = [{ text: 'write to ops@example.com, example inside' }];
  const { ctx } = guardContext({ policies: [p], policyId: 'overlap', inputTexts: texts });
  await guardrailsInStage.run(ctx);
  t.equal(texts[0]!.text, 'write to [EMAIL], [REDACTED] inside');
  t.same(ctx.guardrails.map((v) => v.matches), [1, 2]);
});

t.test('a regex that does not compile fails closed: every request under the policy is blocked, with one log line', async (t) => {
  const p = policy('broken', [{ detector: 'email', action: 'mask' }, { detector: 'regex', pattern: '(unclosed', action: 'flag', on: 'input' }]);
  const first = guardContext({ policies: [p], policyId: 'broken', inputTexts: [{ text: 'harmless' }] });
  const result = await guardrailsInStage.run(first.ctx);
  t.equal(result?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  t.match(result?.error.message, /rule 1 \(regex\) cannot be applied/);
  t.notMatch(result?.error.message, /unclosed/, 'the pattern is not shown to callers');
  const lines = first.logLines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.policyId === 'broken');
  t.equal(lines.length, 1);
  t.match(lines[0], { level: 50, rule: 1, detector: 'regex', reason: /does not compile/ });

  const second = guardContext({ policies: [p], policyId: 'broken', inputTexts: [{ text: 'harmless' }] });
  t.equal((await guardrailsInStage.run(second.ctx))?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  t.equal(second.logLines.length, 0, 'compiled once per policy object, so logged once');
  t.equal(compilePolicy(p), compilePolicy(p), 'the compiled policy is cached');

  second.ctx.reply = jsonReply([{ text: 'a@example.com' }]);
  t.equal(await guardrailsOutStage.run(second.ctx), undefined, 'an input-only broken rule leaves the output side working');
});

t.test('a regex with overlapping alternatives under a repetition that reaches the node fails closed instead of running', async (t) => {
  // `(a|a)*b` takes about 2^n steps on n "a"s without a b: the text below would hold the event loop for hours.
  const p = policy('overlapping', [{ detector: 'regex', pattern: '(a|a)*b', action: 'mask', on: 'input' }]);
  const { ctx, logLines } = guardContext({ policies: [p], policyId: 'overlapping', inputTexts: [{ text: 'a'.repeat(64) }] });
  const result = await guardrailsInStage.run(ctx);
  t.equal(result?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  t.match(result?.error.message, /rule 0 \(regex\) cannot be applied/);
  const lines = logLines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.policyId === 'overlapping');
  t.match(lines[0], { level: 50, rule: 0, detector: 'regex', reason: /overlapping alternatives/ });
});

t.test('a broken output rule refuses a stream before anything is forwarded, and a JSON answer with text after', async (t) => {
  const p = policy('broken-out', [{ detector: 'regex', pattern: '[', action: 'mask', on: 'output' }]);
  const streaming = guardContext({ policies: [p], policyId: 'broken-out', inputTexts: [{ text: 'hi' }], stream: true });
  t.equal((await guardrailsInStage.run(streaming.ctx))?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  const plain = guardContext({ policies: [p], policyId: 'broken-out', inputTexts: [{ text: 'hi' }] });
  t.equal(await guardrailsInStage.run(plain.ctx), undefined);
  plain.ctx.reply = jsonReply([]);
  t.equal(await guardrailsOutStage.run(plain.ctx), undefined, 'an answer without text (embeddings) has nothing to check');
  plain.ctx.reply = jsonReply([{ text: 'hello' }]);
  t.equal((await guardrailsOutStage.run(plain.ctx))?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
});

t.test('a key naming a policy the config lacks is blocked, logged once per config', async (t) => {
  const { ctx, logLines } = guardContext({ policies: [], policyId: 'ghost', inputTexts: [{ text: 'hi' }] });
  const result = await guardrailsInStage.run(ctx);
  t.equal(result?.error.code, 'ZN_ERR_GUARDRAIL_BLOCKED');
  t.match(result?.error.message, /"ghost" is not in this node's config/);
  await guardrailsInStage.run(ctx);
  t.equal(logLines.filter((l) => l.includes('ghost')).length, 1);
});

t.test('the output stage wraps a stream instead of reading it', async (t) => {
  const p = policy('s', [{ detector: 'email', action: 'mask', on: 'output' }]);
  const reply = openAiStream(['a@example.com']);
  const original = reply.events;
  const { ctx } = guardContext({ policies: [p], policyId: 's', reply, stream: true });
  t.equal(await guardrailsOutStage.run(ctx), undefined);
  t.not(reply.events, original, 'the events are wrapped');
  t.same(ctx.guardrails, [], 'nothing is read until the runner pulls');
});
