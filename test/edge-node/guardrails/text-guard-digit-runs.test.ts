// Cards inside runs of digit groups longer than the hold-back window: a stream's scan goes on from
// inside such a run, and must find the cards the whole text's scan finds there.
import t from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import type { PolicySide } from '../../../edge-node/src/guardrails/compiled-policy.js';
import { TextGuard, VerdictTally } from '../../../edge-node/src/guardrails/text-guard.js';
import { policy } from './guardrail-fixtures.js';

const CARDS_ONLY = compilePolicy(policy('cards', [{ detector: 'bank-card', action: 'mask', on: 'output' }])).output;
// A wider window (the secret detector's) and a regex whose matches move the cut to other places.
const CARDS_AND_MORE = compilePolicy(
  policy('cards-and-more', [
    { detector: 'bank-card', action: 'mask', on: 'output' },
    { detector: 'secret', action: 'mask', on: 'output' },
    { detector: 'regex', pattern: '\\d{3}', action: 'flag', on: 'output' },
  ]),
).output;

function whole(side: PolicySide, text: string): string {
  return new TextGuard(side, new VerdictTally('p', 'output', [])).whole(text);
}

function streamed(side: PolicySide, deltas: string[]): string {
  const guard = new TextGuard(side, new VerdictTally('p', 'output', []));
  return deltas.map((d) => guard.push(d)).join('') + guard.end();
}

function pieces(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

t.test('a card at the end of a dash-joined run longer than the window is masked in a stream as in the whole text', async (t) => {
  const text = 'Reference list follows this line. Codes: 0001-0002-0003-0004-0005-0006-0007-0008-4111-1111-1111-1111 end';
  const expected = 'Reference list follows this line. Codes: 0001-0002-0003-0004-0005-0006-0007-0008-[BANK_CARD] end';
  t.equal(whole(CARDS_ONLY, text), expected);
  for (const size of [1, 2, 3, 5, 7, 16]) t.equal(streamed(CARDS_ONLY, pieces(text, size)), expected, `in ${size}-character pieces`);
  const longer = `Codes: ${'0001-'.repeat(40)}4111-1111-1111-1111 and ${'7 '.repeat(60)}5555 5555 5555 4444 end`;
  const want = `Codes: ${'0001-'.repeat(40)}[BANK_CARD] and ${'7 '.repeat(60)}[BANK_CARD] end`;
  t.equal(whole(CARDS_ONLY, longer), want);
  t.equal(streamed(CARDS_ONLY, pieces(longer, 3)), want, 'runs longer than the context the guard keeps');
});

t.test('a card that a shorter card made of the groups before it overlaps is masked whole, streamed as in the whole text', async (t) => {
  const cases: Array<[string, string]> = [
    ['Paid 30003 4532 0151 1283 0366 today, thanks.', 'Paid [BANK_CARD] today, thanks.'],
    ['Paid 3006 4532 0151 1283 0366 today, thanks.', 'Paid [BANK_CARD] today, thanks.'],
  ];
  for (const [text, expected] of cases) {
    t.equal(whole(CARDS_ONLY, text), expected);
    for (const size of [1, 2, 3, 5, 7, 16]) t.equal(streamed(CARDS_ONLY, pieces(text, size)), expected, `in ${size}-character pieces`);
  }
});

t.test('a card after a fraction or a "+" number longer than the window is masked in a stream as in the whole text, the fraction is not', async (t) => {
  // The stream's scan resumes inside the long group: the card after it starts a run of its own
  // there, as in the whole text, so the run is a card as a whole though its first group is short.
  for (const lead of [`score 0.${'5'.repeat(60)}`, `tel +${'5'.repeat(60)}`]) {
    const text = `${lead} 378 282246310005 end`;
    const expected = `${lead} [BANK_CARD] end`;
    t.equal(whole(CARDS_ONLY, text), expected);
    for (const size of [1, 2, 3, 5, 7, 16]) t.equal(streamed(CARDS_ONLY, pieces(text, size)), expected, `${lead.slice(0, 5)} in ${size}-character pieces`);
  }
});

t.test('random texts of digit groups, dashes and spaces mask the same streamed in random pieces as whole', async (t) => {
  let seed = 11;
  const random = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const cards = ['4111-1111-1111-1111', '4111 1111 1111 1111', '5555555555554444', '378282246310005', '2221-0000-0000-0009', '6222021234567890128', '30003 4532 0151 1283 0366', '3006 4532 0151 1283 0366'];
  // No "+": a dash-joined run glued on by one far before the cut is read as a run (see the README).
  // Dots make fractions, hex letters hex tokens.
  const others = ['-', ' ', '-', ' ', '--', 'x', '. ', '\n', '0', '7', '.', '0.', 'e', 'c1', 'ab'];
  let cases = 0;
  let failures = 0;
  for (let k = 0; k < 150; k++) {
    let text = '';
    const length = 100 + random(600);
    while (text.length < length) {
      const r = random(10);
      if (r < 2) text += cards[random(cards.length)];
      else if (r < 6) text += String(random(10 ** (1 + random(6)))).padStart(1 + random(5), '0');
      else text += others[random(others.length)];
    }
    for (const side of [CARDS_ONLY, CARDS_AND_MORE]) {
      const deltas: string[] = [];
      for (let i = 0; i < text.length; ) {
        const size = 1 + random(12);
        deltas.push(text.slice(i, i + size));
        i += size;
      }
      cases++;
      const want = whole(side, text);
      const got = streamed(side, deltas);
      if (got !== want) {
        failures++;
        if (failures <= 3) t.fail('stream and whole text differ', { text, got, want });
      }
    }
  }
  t.equal(failures, 0, `${cases} texts`);
});
