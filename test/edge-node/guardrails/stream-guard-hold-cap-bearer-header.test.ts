// A `Bearer` token after an `Authorization` name that is still undecided (small letters so far)
// when the stream guard's hold cap cuts through it is masked up to the cut, and its head kept as
// context to recognise the rest. The undecided token was held from its `bearer`, so that head
// lacked the Authorization name: the rest was judged by the stricter rule for a token alone
// (a digit among its first 32 characters) and went out in clear, while the whole text masked
// the full token.
import t from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import type { PolicySide } from '../../../edge-node/src/guardrails/compiled-policy.js';
import { MAX_HELD_CHARS, TextGuard, VerdictTally } from '../../../edge-node/src/guardrails/text-guard.js';
import type { GuardrailVerdict } from '../../../proto/src/index.js';
import { policy } from './guardrail-fixtures.js';

const MASK_SECRET = compilePolicy(policy('mask', [{ detector: 'secret', action: 'mask', on: 'output' }])).output;
const BLOCK_SECRET = compilePolicy(policy('block', [{ detector: 'secret', action: 'block', on: 'output' }])).output;

interface Result {
  text: string;
  matches: number[];
  blocked: boolean;
}

function whole(side: PolicySide, text: string): Result {
  const verdicts: GuardrailVerdict[] = [];
  const guard = new TextGuard(side, new VerdictTally('p', 'output', verdicts));
  return { text: guard.whole(text), matches: verdicts.map((v) => v.matches), blocked: guard.blockedBy !== null };
}

function streamed(side: PolicySide, text: string, size: number): Result {
  const verdicts: GuardrailVerdict[] = [];
  const guard = new TextGuard(side, new VerdictTally('p', 'output', verdicts));
  let out = '';
  for (let i = 0; i < text.length; i += size) out += guard.push(text.slice(i, i + size));
  out += guard.end();
  return { text: out, matches: verdicts.map((v) => v.matches), blocked: guard.blockedBy !== null };
}

// Header tokens whose first 32 characters hold no digit, longer than the cap: only the
// Authorization name makes them credentials.
const TEXTS: Array<[string, string]> = [
  [`Authorization: Bearer ${'q'.repeat(MAX_HELD_CHARS + 5000)}7Zx9${'k'.repeat(100)} done`, 'Authorization: Bearer [SECRET] done'],
  [`Authorization: Bearer ${'q'.repeat(MAX_HELD_CHARS + 5000)}7${'q'.repeat(40_000)} done`, 'Authorization: Bearer [SECRET] done'],
  [`{"authorization": "Bearer ${'q'.repeat(MAX_HELD_CHARS + 200)}7abc"}`, '{"authorization": "Bearer [SECRET]"}'],
];

t.test('a header Bearer token the hold cap cuts through while undecided is masked whole in a stream, as in the whole text', async (t) => {
  for (const [text, want] of TEXTS) {
    t.equal(whole(MASK_SECRET, text).text, want, 'the whole text masks the full token');
    for (const size of [1000, 4096, 777]) {
      const got = streamed(MASK_SECRET, text, size);
      t.equal(got.text.length, want.length, `${size}-character deltas: nothing of the token in clear`);
      t.equal(got.text, want);
      t.same(got.matches, [1], 'counted once');
    }
  }
});

t.test('a block rule blocks such a header Bearer token with none of its rest sent', async (t) => {
  for (const [text] of TEXTS) {
    const got = streamed(BLOCK_SECRET, text, 1000);
    t.ok(got.blocked, 'blocked');
    t.notMatch(got.text, /qqqq/, 'none of the token sent');
  }
});

t.test('a Bearer token alone (no Authorization name) is still judged by the stricter rule', async (t) => {
  const prose = `pay to bearer ${'q'.repeat(MAX_HELD_CHARS + 5000)}7 done`;
  t.equal(whole(MASK_SECRET, prose).text, prose, 'no digit among its first 32: no credential in the whole text');
  t.equal(streamed(MASK_SECRET, prose, 1000).text, prose, 'nor in a stream');
});
