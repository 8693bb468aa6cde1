// Assigned secrets streamed in pieces split anywhere (once, twice, three times) are masked exactly
// as in the whole text: a secret word inside a value already masked names nothing, an assignment
// whose value is still undecided is held from its name, and quoted values with spaces, escapes and
// every quote shape agree.
import t from 'tap';
import type { Test } from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import type { PolicySide } from '../../../edge-node/src/guardrails/compiled-policy.js';
import { guardStream } from '../../../edge-node/src/guardrails/stream-guard.js';
import { TextGuard, VerdictTally } from '../../../edge-node/src/guardrails/text-guard.js';
import type { GuardrailVerdict } from '../../../proto/src/index.js';
import { drain, guardContext, openAiStream, openAiText, policy } from './guardrail-fixtures.js';

const SECRET_MASK = policy('secret', [{ detector: 'secret', action: 'mask', on: 'output' }]);
const SECRET_ONLY = compilePolicy(SECRET_MASK).output;
// Every built-in detector: the e-mail window (254) moves the cuts elsewhere.
const ALL = compilePolicy(
  policy('all', [
    { detector: 'email', action: 'mask', on: 'output' },
    { detector: 'phone', action: 'mask', on: 'output' },
    { detector: 'prc-resident-id', action: 'mask', on: 'output' },
    { detector: 'bank-card', action: 'mask', on: 'output' },
    { detector: 'secret', action: 'mask', on: 'output' },
  ]),
).output;
const FILLER = 'Some ordinary words in between, numbers 2024 and 42, nothing to hide here at all. Really nothing, just prose. ';

interface Result {
  text: string;
  matches: number[];
}

function whole(side: PolicySide, text: string): Result {
  const verdicts: GuardrailVerdict[] = [];
  return { text: new TextGuard(side, new VerdictTally('p', 'output', verdicts)).whole(text), matches: verdicts.map((v) => v.matches) };
}

function streamed(side: PolicySide, deltas: string[]): Result {
  const verdicts: GuardrailVerdict[] = [];
  const guard = new TextGuard(side, new VerdictTally('p', 'output', verdicts));
  const text = deltas.map((d) => guard.push(d)).join('') + guard.end();
  return { text, matches: verdicts.map((v) => v.matches) };
}

function cutAt(text: string, points: number[]): string[] {
  const deltas: string[] = [];
  let at = 0;
  for (const p of points) {
    deltas.push(text.slice(at, p));
    at = p;
  }
  deltas.push(text.slice(at));
  return deltas;
}

/**
 * Streams `text` split at every point, at every pair of points `pairStep` apart, at triples
 * `tripleStep` apart, and in pieces of 1 to 24 characters; counts the results unlike the whole text's.
 */
function checkSplits(t: Test, side: PolicySide, text: string, opts: { pairStep: number; tripleStep: number }): void {
  const want = JSON.stringify(whole(side, text));
  const n = text.length;
  const splits: number[][] = [];
  for (let i = 0; i <= n; i++) splits.push([i]);
  for (let i = 0; i <= n; i += opts.pairStep) for (let j = i; j <= n; j += opts.pairStep) splits.push([i, j]);
  for (let i = 0; i <= n; i += opts.tripleStep) for (let j = i; j <= n; j += opts.tripleStep) for (let k = j; k <= n; k += opts.tripleStep) splits.push([i, j, k]);
  for (let size = 1; size <= 24; size++) {
    const points: number[] = [];
    for (let at = size; at < n; at += size) points.push(at);
    splits.push(points);
  }
  let failures = 0;
  for (const points of splits) {
    const got = JSON.stringify(streamed(side, cutAt(text, points)));
    if (got === want) continue;
    failures++;
    if (failures <= 3) t.fail(`split at ${points.length > 3 ? `every ${points[0]}` : points.join(', ')}`, { got, want });
  }
  t.equal(failures, 0, `${splits.length} ways to split ${JSON.stringify(text.slice(0, 60))}…`);
}

t.test('a secret word inside a quoted value already masked names nothing in a stream, at any split', async (t) => {
  // The stream's scan starts a few characters back to see a name it released; it read the word
  // inside the released value as a new name and masked what follows the value's closing quote.
  const cases: Array<[string, string]> = [
    [`${FILLER}${FILLER}password="， x hunter2 ， and token: "more words here"${FILLER}`, `${FILLER}${FILLER}password="[SECRET]"more words here"${FILLER}`],
    [`${FILLER}password：「hunter2 x ， battery correct hunter2 pwd=abc」Some words${FILLER}`, `${FILLER}password：「[SECRET]」Some words${FILLER}`],
    [`${FILLER}password = “correct pwd=abc a,b it's pwd=abc”token${FILLER}${FILLER}`, `${FILLER}password = “[SECRET]”token${FILLER}${FILLER}`],
  ];
  for (const [text, expected] of cases) {
    t.equal(whole(SECRET_ONLY, text).text, expected, 'the whole text masks the quoted value only');
    checkSplits(t, SECRET_ONLY, text, { pairStep: 3, tripleStep: 29 });
  }
});

t.test('an assignment whose quoted value is still open is held from its name, however many blanks stand between', async (t) => {
  const value = 'correct horse battery staple and some more words to be long enough for it to matter ok';
  for (const blanks of [1, 40, 100, 180]) {
    const text = `${FILLER}${FILLER}password:${' '.repeat(blanks)}"${value}" ${FILLER}${FILLER}`;
    t.equal(whole(SECRET_ONLY, text).text, `${FILLER}${FILLER}password:${' '.repeat(blanks)}"[SECRET]" ${FILLER}${FILLER}`);
    checkSplits(t, SECRET_ONLY, text, { pairStep: 17, tripleStep: 97 });
  }
  // Held from the value only, the name went out once the open value passed the window, and the
  // next scan saw a quoted value with no name: it went out in clear.
  const text = `${FILLER}password:${' '.repeat(100)}"${value}" done`;
  const at = text.indexOf(value) + 80;
  const got = streamed(SECRET_ONLY, [text.slice(0, at), text.slice(at)]);
  t.notMatch(got.text, /correct horse/, 'no part of the passphrase in clear');
});

t.test('quoted passphrases with spaces in every quote and name shape are masked alike streamed and whole, at one, two and three splits', async (t) => {
  const shapes: Array<[string, string]> = [
    ['password: "correct horse battery"', 'password: "[SECRET]"'],
    ["password: 'correct horse battery'", "password: '[SECRET]'"],
    ['token="correct horse battery"', 'token="[SECRET]"'],
    ['api_key: "correct horse battery"', 'api_key: "[SECRET]"'],
    ['api_key: correcthorsebattery and more', 'api_key: [SECRET] and more'],
    ['token=correct horse battery', 'token=correct horse battery'],
    ['{"password": "correct \\"horse\\" battery", "user": "bob"}', '{"password": "[SECRET]", "user": "bob"}'],
    ['"{\\"password\\": \\"correct horse battery\\", \\"user\\": \\"bob\\"}"', '"{\\"password\\": \\"[SECRET]\\", \\"user\\": \\"bob\\"}"'],
    ["secret = 'it\\'s a long passphrase'", "secret = '[SECRET]'"],
    ['密码：“correct horse battery”，请牢记', '密码：“[SECRET]”，请牢记'],
  ];
  for (const [shape, masked] of shapes) {
    for (const [lead, trail] of [['', ''], [FILLER, FILLER], [FILLER + FILLER, '']]) {
      const text = `${lead}${shape}${trail}`;
      t.equal(whole(SECRET_ONLY, text).text, `${lead}${masked}${trail}`, shape);
      for (const side of [SECRET_ONLY, ALL]) checkSplits(t, side, text, { pairStep: text.length > 100 ? 5 : 1, tripleStep: text.length > 100 ? 31 : 3 });
    }
  }
});

t.test('a chat stream through the stream guard masks quoted passphrases as the whole answer does, at every two-way split', async (t) => {
  const text = `${FILLER}password: "correct horse battery" and then password="， x hunter2 ， and token: "more words here"${FILLER}${FILLER}`;
  const expected = `${FILLER}password: "[SECRET]" and then password="[SECRET]"more words here"${FILLER}${FILLER}`;
  t.equal(whole(SECRET_ONLY, text).text, expected);
  let failures = 0;
  for (let i = 0; i <= text.length; i += 1) {
    const reply = openAiStream([text.slice(0, i), text.slice(i)].filter((d) => d !== ''));
    const { ctx } = guardContext({ policies: [SECRET_MASK], policyId: SECRET_MASK.id, reply, stream: true });
    guardStream(ctx, compilePolicy(SECRET_MASK), reply);
    const { events, error } = await drain(reply);
    const got = error === undefined ? openAiText(events) : 'the stream failed';
    if (got === expected) continue;
    failures++;
    if (failures <= 3) t.fail(`split at ${i}`, { got, want: expected });
  }
  t.equal(failures, 0, `all ${text.length + 1} split points`);
});

t.test('a secret word later in a name is still a name when an earlier one is not a word (tokenizer_password), streamed as whole', async (t) => {
  const text = `${FILLER}tokenizer_password: hunter2hunter2 and passwordtoken=abcdefgh12 ${FILLER}`;
  t.equal(whole(SECRET_ONLY, text).text, `${FILLER}tokenizer_password: [SECRET] and passwordtoken=[SECRET] ${FILLER}`);
  checkSplits(t, SECRET_ONLY, text, { pairStep: 7, tripleStep: 41 });
});
