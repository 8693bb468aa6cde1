// The stream guard's hold cap (64 Ki characters held) releases text anyway, but never cuts inside a
// value a detector is still matching: a Bearer token, an assignment's value, a key, a JWT, a card,
// a phone number or an address that had only begun when the cap was reached is held (or, when it
// has itself grown past half the cap, masked) rather than sent in part. Before, the cap released
// everything that had arrived, so `Authorization: Bearer abc123` went out in clear and only the
// `token…` that followed was masked (or, for a JWT, nothing at all).
import t from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import type { PolicySide } from '../../../edge-node/src/guardrails/compiled-policy.js';
import { MAX_HELD_CHARS, TextGuard, VerdictTally } from '../../../edge-node/src/guardrails/text-guard.js';
import type { GuardrailVerdict } from '../../../proto/src/index.js';
import { policy } from './guardrail-fixtures.js';

const MASK_ALL = compilePolicy(
  policy('all', [
    { detector: 'email', action: 'mask', on: 'output' },
    { detector: 'phone', action: 'mask', on: 'output' },
    { detector: 'bank-card', action: 'mask', on: 'output' },
    { detector: 'secret', action: 'mask', on: 'output' },
  ]),
).output;
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

function streamed(side: PolicySide, deltas: string[]): Result {
  const verdicts: GuardrailVerdict[] = [];
  const guard = new TextGuard(side, new VerdictTally('p', 'output', verdicts));
  const text = deltas.map((d) => guard.push(d)).join('') + guard.end();
  return { text, matches: verdicts.map((v) => v.matches), blocked: guard.blockedBy !== null };
}

// A long secret held whole (it reaches the end of what arrived) until it ends, then prose: the
// guard scans again only once the held text has doubled, so the next scan is the cap's.
const LONG_KEY = `token: ${'A1b2'.repeat(15_000)}`;
const FILLER = ` then plain words. ${'Nothing to hide in these words at all. '.repeat(Math.ceil((MAX_HELD_CHARS - LONG_KEY.length) / 39) + 8)}`;

/** Prose longer than the cap, sent in one delta (an upstream's one large chunk). */
const LONG_PROSE = 'Nothing to hide in these words at all. '.repeat(Math.ceil(MAX_HELD_CHARS / 39) + 8);

/**
 * The two ways to the cap, each cut inside `value` after `k` characters: the long key, then the
 * filler and `value` up to `k`; or prose longer than the cap and `value` up to `k` in one delta.
 * Then the rest of `value`.
 */
function cutsAt(value: string, k: number): Array<{ how: string; deltas: string[] }> {
  return [
    { how: 'after a long key', deltas: [LONG_KEY, `${FILLER}${value.slice(0, k)}`, value.slice(k)] },
    { how: 'in one long delta', deltas: [`${LONG_PROSE}${value.slice(0, k)}`, value.slice(k)] },
  ];
}

// Values split at the cap, with what the secret in each must not show.
const VALUES: Array<[string, string]> = [
  ['curl -H "Authorization: Bearer abc123tokenXYZ789" https://api.example.com', 'abc123'],
  ['Use Bearer 9f86d081884c7d659a2feaa0c55ad015 as the credential.', '9f86d0'],
  ['password=hunter2isMySecret and then', 'hunter'],
  ['api_key: "my pass phrase 42" said so', 'my pass'],
  ['jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U end', 'eyJhbGci'],
  ['key sk-proj-Abc123Def456Ghi789Jkl0 end', 'sk-proj'],
  ['card 4532 0151 1283 0366 paid', '4532 0151'],
  ['call 138 1234 5678 today', '138 1234'],
  ['write to someone.long.name@example.com soon', 'someone'],
];

t.test('a value split by the hold cap’s release is masked whole, as in the whole text, never its first piece in clear', async (t) => {
  t.ok(LONG_KEY.length + FILLER.length > MAX_HELD_CHARS, 'the filler takes the held text past the cap');
  let failures = 0;
  for (const [value, secretPiece] of VALUES) {
    for (let k = 1; k < value.length; k++) {
      for (const { how, deltas } of cutsAt(value, k)) {
        const want = whole(MASK_ALL, deltas.join(''));
        if (want.text.includes(secretPiece)) t.fail(`the whole text masks ${secretPiece}`);
        const got = streamed(MASK_ALL, deltas);
        if (JSON.stringify(got) === JSON.stringify(want)) continue;
        if (++failures <= 3) t.fail(`${how}, ${value} cut after ${JSON.stringify(value.slice(0, k))}`, { got: got.text.slice(-120), want: want.text.slice(-120) });
      }
    }
  }
  t.equal(failures, 0, 'every cut in every value');
});

t.test('a block rule split by the hold cap’s release blocks with none of the secret sent', async (t) => {
  let failures = 0;
  for (const [value, secretPiece] of VALUES.slice(0, 6)) {
    for (let k = 1; k < value.length; k++) {
      const got = streamed(BLOCK_SECRET, [`${LONG_PROSE}${value.slice(0, k)}`, value.slice(k)]);
      if (got.blocked && !got.text.includes(secretPiece.slice(0, 3))) continue;
      if (++failures <= 3) t.fail(`${value} cut after ${JSON.stringify(value.slice(0, k))}`, { blocked: got.blocked, tail: got.text.slice(-80) });
    }
  }
  t.equal(failures, 0, 'every cut blocks, none of the secret sent');
});

t.test('an undecided value that has itself grown past half the cap is masked, not sent, when the cap cuts through it', async (t) => {
  const deltas = (text: string): string[] => text.match(/[\s\S]{1,1000}/g)!;
  // A JWT whose header alone is longer than the cap: no match until its second dot.
  const jwt = `eyJ${'a'.repeat(MAX_HELD_CHARS)}.eyJzdWIiOiIxIn0.c2lnbmF0dXJl`;
  const jwtText = `token is ${jwt} and then words`;
  t.equal(whole(MASK_ALL, jwtText).text, 'token is [SECRET] and then words');
  t.equal(streamed(MASK_ALL, deltas(jwtText)).text, 'token is [SECRET] and then words', 'none of the header in clear');
  // A header token in small letters (no credential yet) that a digit makes one at its end.
  const bearer = `Authorization: Bearer ${'q'.repeat(MAX_HELD_CHARS)}7 done`;
  t.equal(whole(MASK_ALL, bearer).text, 'Authorization: Bearer [SECRET] done');
  const got = streamed(MASK_ALL, deltas(bearer));
  t.equal(got.text, 'Authorization: Bearer [SECRET] done');
  t.same(got.matches, [1], 'counted once');
});
