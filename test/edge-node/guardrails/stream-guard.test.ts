// Output rules over streamed answers: matches split across deltas at every position are masked as
// in the whole text, every event stays valid JSON in its provider's shape, held text is released
// before its block closes, and a block ends the stream with the guardrail code and no blocked text.
import t from 'tap';
import type { Test } from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import { applyPolicy } from '../../../edge-node/src/guardrails/policy-engine.js';
import { guardStream } from '../../../edge-node/src/guardrails/stream-guard.js';
import { MAX_HELD_CHARS } from '../../../edge-node/src/guardrails/text-guard.js';
import { isZenovaError } from '../../../edge-node/src/errors.js';
import type { GuardrailPolicy } from '../../../proto/src/index.js';
import { anthropicStream, drain, guardContext, openAiStream, openAiText, policy } from './guardrail-fixtures.js';
import type { StreamReply } from './guardrail-fixtures.js';

const MASK_ALL = policy('mask-all', [
  { detector: 'email', action: 'mask', on: 'output' },
  { detector: 'phone', action: 'mask', on: 'output' },
  { detector: 'prc-resident-id', action: 'mask', on: 'output' },
  { detector: 'bank-card', action: 'mask', on: 'output' },
  { detector: 'secret', action: 'mask', on: 'output' },
  { detector: 'keywords', keywords: ['机密', 'Project Phoenix'], action: 'mask', on: 'output' },
  { detector: 'email', action: 'flag', on: 'output' },
]);

const PII_TEXT =
  '你好！邮箱 zhang.san@example.com，手机 +86 138 0013 8000，身份证 11010519491231002X，' +
  '卡 4111 1111 1111 1111；key sk-proj-Abc123Def456Ghi789Jkl0 与机密的 project phoenix。结束';
const PII_MASKED = '你好！邮箱 [EMAIL]，手机 [PHONE]，身份证 [PRC_ID]，卡 [BANK_CARD]；key [SECRET] 与[REDACTED]的 [REDACTED]。结束';
// Longer than the hold-back window several times over, so text is released mid-stream, not only at the end.
const FILLER = ' Some ordinary words in between, numbers 2024 and 42, nothing to hide here at all. ';
const TEXT = [PII_TEXT, FILLER, FILLER, PII_TEXT, FILLER, FILLER, FILLER, PII_TEXT].join('');

/** Verdicts by rule: a stream records each rule when its first match is released, so the order may differ. */
function byRule(verdicts: unknown[]): unknown[] {
  return [...(verdicts as Array<{ rule: number }>)].sort((a, b) => a.rule - b.rule);
}

/** What the whole text becomes under `p` (the non-stream path), and its verdicts. */
function wholeResult(p: GuardrailPolicy, text: string): { text: string; verdicts: unknown[] } {
  const slot = { text };
  const { ctx } = guardContext({ policies: [p], policyId: p.id });
  applyPolicy(ctx, compilePolicy(p), 'output', [slot]);
  return { text: slot.text, verdicts: byRule(ctx.guardrails) };
}

async function streamed(p: GuardrailPolicy, deltas: string[]): Promise<{ text: string; verdicts: unknown[]; events: Array<{ data: string }>; error: unknown }> {
  const reply = openAiStream(deltas);
  const { ctx } = guardContext({ policies: [p], policyId: p.id, reply, stream: true });
  guardStream(ctx, compilePolicy(p), reply);
  const { events, error } = await drain(reply);
  return { text: error === undefined ? openAiText(events) : '', verdicts: byRule(ctx.guardrails), events, error };
}

function assertOpenAiFraming(t: Test, events: Array<{ data: string }>): void {
  t.equal(events.at(-1)?.data, '[DONE]', '[DONE] comes last');
  for (const e of events.slice(0, -1)) {
    const chunk = JSON.parse(e.data) as { object?: string; choices?: unknown[] };
    if (chunk.object !== 'chat.completion.chunk' || !Array.isArray(chunk.choices)) {
      t.fail(`not a chat chunk: ${e.data}`);
      return;
    }
  }
}

t.test('the whole-text result masks every detector (the reference for the stream cases)', async (t) => {
  const { text, verdicts } = wholeResult(MASK_ALL, TEXT);
  t.equal(text, [PII_MASKED, FILLER, FILLER, PII_MASKED, FILLER, FILLER, FILLER, PII_MASKED].join(''));
  t.equal(verdicts.length, 7);
  t.ok(TEXT.length > 3 * compilePolicy(MASK_ALL).output.window, 'the text is several hold-back windows long');
});

t.test('a stream split in two at every position gives exactly the whole-text masking and verdicts', async (t) => {
  const expected = wholeResult(MASK_ALL, TEXT);
  let failures = 0;
  for (let i = 0; i <= TEXT.length; i++) {
    const got = await streamed(MASK_ALL, [TEXT.slice(0, i), TEXT.slice(i)]);
    if (got.text !== expected.text || JSON.stringify(got.verdicts) !== JSON.stringify(expected.verdicts)) {
      failures++;
      if (failures <= 3) t.fail(`split at ${i}`, { got: got.text, want: expected.text });
    }
  }
  t.equal(failures, 0, `all ${TEXT.length + 1} split points`);
});

t.test('a stream split in three at many positions, and one character per delta, masks the same', async (t) => {
  const expected = wholeResult(MASK_ALL, TEXT);
  let cases = 0;
  let failures = 0;
  for (let i = 0; i < TEXT.length; i += 11) {
    for (let j = i; j <= TEXT.length; j += 29) {
      cases++;
      const got = await streamed(MASK_ALL, [TEXT.slice(0, i), TEXT.slice(i, j), TEXT.slice(j)]);
      if (got.text !== expected.text) {
        failures++;
        if (failures <= 3) t.fail(`split at ${i}, ${j}`, { got: got.text });
      }
    }
  }
  t.equal(failures, 0, `${cases} three-way splits`);
  const perChar = await streamed(MASK_ALL, [...TEXT]);
  t.equal(perChar.text, expected.text);
  const released = perChar.events.slice(0, -1).map((e) => JSON.parse(e.data) as { choices: Array<{ delta: { content?: string }; finish_reason: string | null }> });
  const firstRelease = released.findIndex((c) => (c.choices[0]?.delta.content ?? '') !== '');
  t.ok(firstRelease > 0 && firstRelease < TEXT.length / 2, 'text is released while the stream goes, not all at its end');
  assertOpenAiFraming(t, perChar.events);
  t.same(perChar.verdicts, expected.verdicts);
});

t.test('a quoted passphrase split across deltas at every position is masked whole, as in the whole text', async (t) => {
  const secretOnly = policy('secret-only', [{ detector: 'secret', action: 'mask', on: 'output' }]);
  // Straight quotes, and the typographic ones an input method types (held open the same way).
  for (const [open, close] of [['"', '"'], ['“', '”'], ['「', '」']]) {
    const text = `${FILLER}config: password = ${open}Tr0ub4dor&3 and more words here${close} then ${FILLER}`;
    const expected = wholeResult(secretOnly, text);
    t.ok(expected.text.includes(`password = ${open}[SECRET]${close} then`), `${open}…${close}: the whole value is the match`);
    let failures = 0;
    for (let i = 0; i <= text.length; i++) {
      const got = await streamed(secretOnly, [text.slice(0, i), text.slice(i)]);
      if (got.text !== expected.text) {
        failures++;
        if (failures <= 3) t.fail(`${open}…${close} split at ${i}`, { got: got.text, want: expected.text });
      }
    }
    t.equal(failures, 0, `${open}…${close}: all ${text.length + 1} split points`);
  }
});

t.test('an unquoted secret with an apostrophe or CJK punctuation inside, split at every position, is masked as in the whole text', async (t) => {
  const secretOnly = policy('secret-only', [{ detector: 'secret', action: 'mask', on: 'output' }]);
  const text = `${FILLER}The password: Don’tTellAnyone42 for the VPN. passwd=It’s-a-Secret-2024 api_key=sk-ab，cdefghijklmnop 您的初始密码：Tmp2024ab，有效期24小时${FILLER}`;
  const expected = wholeResult(secretOnly, text);
  t.ok(expected.text.includes('The password: [SECRET] for the VPN. passwd=[SECRET] api_key=[SECRET] 您的初始密码：[SECRET]，有效期24小时'), 'each value masked whole');
  let failures = 0;
  for (let i = 0; i <= text.length; i++) {
    const got = await streamed(secretOnly, [text.slice(0, i), text.slice(i)]);
    if (got.text !== expected.text) {
      failures++;
      if (failures <= 3) t.fail(`split at ${i}`, { got: got.text, want: expected.text });
    }
  }
  t.equal(failures, 0, `all ${text.length + 1} split points`);
  t.equal((await streamed(secretOnly, [...text])).text, expected.text, 'one character per delta');
});

t.test('an assignment whose name starts far before its value (a long name, blanks around the separator) is masked, or blocked, in a stream at every split and delta size', async (t) => {
  const secretOnly = policy('secret-only', [{ detector: 'secret', action: 'mask', on: 'output' }]);
  const blockSecret = policy('secret-block', [{ detector: 'secret', action: 'block', on: 'output' }]);
  const values = ['wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', 'hunter2hunter2'];
  const text =
    `${FILLER}AWS_SECRET_ACCESS_KEY_FOR_PRODUCTION_BACKUPS_BUCKET_EU=${values[0]}${FILLER}` +
    `password:${' '.repeat(15)}\n${values[1]} ${FILLER}`;
  const expected = wholeResult(secretOnly, text);
  t.ok(expected.text.includes('_BUCKET_EU=[SECRET]') && expected.text.includes(':               \n[SECRET] '), 'the whole text masks both values');
  let failures = 0;
  const check = (got: { text: string }, how: string): void => {
    if (got.text === expected.text) return;
    failures++;
    if (failures <= 3) t.fail(how, { got: got.text, want: expected.text });
  };
  for (let i = 0; i <= text.length; i++) check(await streamed(secretOnly, [text.slice(0, i), text.slice(i)]), `split at ${i}`);
  for (let size = 1; size <= 40; size++) {
    const deltas: string[] = [];
    for (let at = 0; at < text.length; at += size) deltas.push(text.slice(at, at + size));
    check(await streamed(secretOnly, deltas), `deltas of ${size}`);
    const blocked = await streamed(blockSecret, deltas);
    const sent = blocked.events.map((e) => e.data).join('');
    if (!isZenovaError(blocked.error) || values.some((v) => sent.includes(v.slice(0, 8)))) {
      failures++;
      if (failures <= 3) t.fail(`blocked, deltas of ${size}`, { error: String(blocked.error) });
    }
  }
  t.equal(failures, 0, `all ${text.length + 1} split points and delta sizes 1–40, masked and blocked`);
});

t.test('every emitted event is a valid chat chunk, the held text comes before the finish chunk', async (t) => {
  const got = await streamed(MASK_ALL, ['Contact a@exam', 'ple.com now']);
  assertOpenAiFraming(t, got.events);
  const chunks = got.events.slice(0, -1).map((e) => JSON.parse(e.data) as { choices: Array<{ delta: { content?: string }; finish_reason: string | null }> });
  const finishAt = chunks.findIndex((c) => c.choices[0]?.finish_reason === 'stop');
  const lastText = chunks.findLastIndex((c) => (c.choices[0]?.delta.content ?? '') !== '');
  t.ok(finishAt > lastText, 'all text is out before finish_reason');
  t.equal(got.text, 'Contact [EMAIL] now');
  t.notMatch(got.events.map((e) => e.data).join('\n'), /exam|ple\.com/, 'no piece of the address is on the wire');
});

t.test('text without matches passes unchanged, only delayed by the hold-back window', async (t) => {
  const text = 'Plain prose with numbers 42 and 2024, nothing personal at all. '.repeat(20);
  const deltas = text.match(/.{1,5}/gs)!;
  const got = await streamed(MASK_ALL, deltas);
  t.equal(got.text, text);
  t.same(got.verdicts, []);
});

t.test('a block in the output ends the stream with ZN_ERR_GUARDRAIL_BLOCKED and never releases the match', async (t) => {
  const p = policy('stop', [{ detector: 'bank-card', action: 'block', on: 'output' }]);
  const intro = 'Here is some harmless introduction text that goes on for a while. '.repeat(2);
  const reply = openAiStream([intro, 'your card is 4111 1111 ', '1111 1111 ok', ' and more text after']);
  const { ctx } = guardContext({ policies: [p], policyId: 'stop', reply, stream: true });
  guardStream(ctx, compilePolicy(p), reply);
  const { events, error } = await drain(reply);
  t.ok(isZenovaError(error) && error.code === 'ZN_ERR_GUARDRAIL_BLOCKED', 'the stream throws the guardrail code for the runner');
  t.match((error as Error).message, /policy "stop" rule 0 \(bank-card\) on the output/);
  t.notMatch((error as Error).message, /4111/);
  t.notMatch(events.map((e) => e.data).join(''), /4111|1111/, 'no digit of the card reached the caller');
  t.ok(openAiText(events).startsWith('Here is some'), 'text before the match was delivered');
  t.ok(reply.closed(), 'the upstream events were closed (the upstream call is aborted)');
  t.same(ctx.guardrails, [{ policyId: 'stop', rule: 0, detector: 'bank-card', action: 'block', on: 'output', matches: 1 }]);
});

t.test('flag on a stream leaves the text and counts matches across deltas', async (t) => {
  const p = policy('watch', [{ detector: 'phone', action: 'flag', on: 'output' }]);
  const got = await streamed(p, ['call 1380013', '8000 or 1391234', '5678 today']);
  t.equal(got.text, 'call 13800138000 or 13912345678 today');
  t.same(got.verdicts, [{ policyId: 'watch', rule: 0, detector: 'phone', action: 'flag', on: 'output', matches: 2 }]);
});

t.test('Anthropic framing: held text is released inside its own block, pings do not cut a match', async (t) => {
  const p = policy('a', [{ detector: 'email', action: 'mask', on: 'output' }, { detector: 'secret', action: 'mask', on: 'output' }]);
  const reply = anthropicStream([
    ['Write to zhang', '.san@exa', 'mple.com please'],
    ['key: AKIAIOSF', 'ODNN7EXAMPLE'],
  ]);
  const { ctx } = guardContext({ policies: [p], policyId: 'a', reply, stream: true });
  guardStream(ctx, compilePolicy(p), reply);
  const { events, error } = await drain(reply);
  t.equal(error, undefined);
  const parsed = events.map((e) => ({ event: e.event, json: JSON.parse(e.data) as { type: string; index?: number; delta?: { text?: string } } }));
  for (const e of parsed) t.equal(e.event, e.json.type, `event name matches its type (${e.event})`);
  t.equal(parsed.at(-1)?.event, 'message_stop');
  const textOf = (index: number): string => parsed.filter((e) => e.json.type === 'content_block_delta' && e.json.index === index).map((e) => e.json.delta?.text ?? '').join('');
  t.equal(textOf(0), 'Write to [EMAIL] please');
  t.equal(textOf(1), 'key: [SECRET]');
  // Each block's deltas all come between its start and its stop.
  for (const index of [0, 1]) {
    const start = parsed.findIndex((e) => e.json.type === 'content_block_start' && e.json.index === index);
    const stop = parsed.findIndex((e) => e.json.type === 'content_block_stop' && e.json.index === index);
    const deltas = parsed.map((e, i) => ({ e, i })).filter(({ e }) => e.json.type === 'content_block_delta' && e.json.index === index);
    t.ok(deltas.every(({ i }) => i > start && i < stop), `block ${index} deltas inside the block`);
  }
});

t.test('a match longer than the hold-back window is held whole while it grows, then masked as one', async (t) => {
  const p = policy('jwt', [{ detector: 'secret', action: 'mask', on: 'output' }]);
  const jwt = `eyJhbGciOiJSUzI1NiJ9.eyJ${'c3ViIjoiMTIzNDU2Nzg5MCJ9'.repeat(20)}.${'x'.repeat(300)}`;
  const text = `token ${jwt} end`;
  t.ok(jwt.length > 2 * compilePolicy(p).output.window);
  const got = await streamed(p, text.match(/.{1,10}/gs)!);
  t.equal(got.text, 'token [SECRET] end');
});

t.test('held text goes out in a terminal event that carries text itself, nothing after it', async (t) => {
  const p = policy('t', [{ detector: 'email', action: 'mask', on: 'output' }]);
  const slots = [{ text: 'write to a@exa' }, { text: 'mple.com now' }];
  const events = [{ sse: { data: '1' }, texts: [slots[0]!] }, { sse: { data: '2' }, texts: [slots[1]!], terminal: true }];
  const reply: StreamReply = {
    kind: 'stream',
    status: 200,
    headers: {},
    events: (async function* () {
      yield* events;
    })(),
    textEvent: () => {
      throw new Error('no new event may follow the terminal one');
    },
    errorEvent: () => ({ sse: { data: 'error' }, texts: [] }),
  };
  const { ctx } = guardContext({ policies: [p], policyId: 't', reply, stream: true });
  guardStream(ctx, compilePolicy(p), reply);
  const { events: out, error } = await drain(reply);
  t.equal(error, undefined);
  t.equal(out.length, 2);
  t.equal(slots.map((s) => s.text).join(''), 'write to [EMAIL] now');
  t.equal(slots[1]!.text, 'write to [EMAIL] now', 'all held text is in the terminal event');
});

t.test('a match that never ends is released (masked) once the held text passes its bound', async (t) => {
  const p = policy('pem', [{ detector: 'secret', action: 'mask', on: 'output' }]);
  const body = 'A'.repeat(1000);
  const deltas = ['-----BEGIN PRIVATE KEY-----\n', ...Array.from({ length: Math.ceil(MAX_HELD_CHARS / 1000) + 5 }, () => body)];
  const got = await streamed(p, deltas);
  t.ok(got.text.startsWith('[SECRET]'), 'the key block is masked, not released in the clear');
  t.notMatch(got.text, /BEGIN PRIVATE KEY/);
});
