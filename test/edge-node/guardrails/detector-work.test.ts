// Every built-in detector stays linear on crafted input up to the body limit: repeats of each
// literal prefix a detector keys on (the shapes that made the secret detector quadratic) are
// scanned within a bound 50x or more above what a linear scan takes, even on a loaded machine.
import t from 'tap';
import { findBankCards } from '../../../edge-node/src/guardrails/detectors/bank-card.js';
import type { Match } from '../../../edge-node/src/guardrails/detectors/detector.js';
import { findEmails } from '../../../edge-node/src/guardrails/detectors/email.js';
import { compileKeywords } from '../../../edge-node/src/guardrails/detectors/keywords.js';
import { findPhones } from '../../../edge-node/src/guardrails/detectors/phone.js';
import { findPrcResidentIds } from '../../../edge-node/src/guardrails/detectors/prc-resident-id.js';
import { findSecrets } from '../../../edge-node/src/guardrails/detectors/secret.js';

const DETECTORS: Record<string, (text: string, from?: number) => Match[]> = {
  email: findEmails,
  phone: findPhones,
  'prc-resident-id': findPrcResidentIds,
  'bank-card': findBankCards,
  secret: findSecrets,
  keywords: compileKeywords(['password', 'top secret', '机密']),
};

const SHAPES = [
  'eyJ', 'eyJa.', 'eyJaaaa.eyJ', 'sk-', 'xsk-', 'sk-ant-', 'AKIA', 'ghp_', 'xoxb-', 'AIza',
  'token', 'pwd', 'password ', 'api_key', 'token=', '密码', '-----BEGIN ', '-----BEGIN PRIVATE KEY-----', '-----END ',
  '@', 'a@', 'a.', '1', '1 ', '1-', '1.', '138.', '+1 ', '+1.', '+8', '(+86) ', '4111 ', '110105 ', '110105-',
  '１', '１ ', '４１１１　', '＠', 'ａ＠', '（＋８６）',
];

const SIZE = 1_000_000;
// A linear scan of 1 MB takes a few to some hundreds of milliseconds; the quadratic scans took
// hours. The bound sits far from both, so a loaded CI machine cannot make this test flaky.
const BOUND_MS = 20_000;

t.test('every built-in detector scans 1 MB of repeated literal prefixes in linear time', async (t) => {
  for (const find of Object.values(DETECTORS)) {
    // Warm the regexes up (V8 interprets a regex before it compiles it).
    for (const shape of SHAPES) find(shape.repeat(200));
  }
  let slowest = { ms: 0, what: '' };
  for (const shape of SHAPES) {
    const text = shape.repeat(Math.ceil(SIZE / shape.length));
    for (const [name, find] of Object.entries(DETECTORS)) {
      const started = performance.now();
      find(text);
      const ms = performance.now() - started;
      if (ms > slowest.ms) slowest = { ms, what: `${name} on ${JSON.stringify(shape)}` };
      if (ms > BOUND_MS) t.fail(`${name} took ${Math.round(ms)} ms on ${JSON.stringify(shape)} x ${text.length / shape.length}`);
    }
  }
  t.comment(`slowest: ${slowest.what}, ${Math.round(slowest.ms)} ms`);
  t.pass('all scans within the bound');
});

t.test('the secret detector does not rescan a token run for every prefix inside it (the review shapes)', async (t) => {
  // 75 KB of "eyJ" froze a node for 3.4 s before (so 750 KB for minutes); now it is one pass.
  for (const shape of ['eyJ', 'token', 'pwd']) {
    const text = shape.repeat(250_000);
    findSecrets(text.slice(0, 300));
    const started = performance.now();
    t.same(findSecrets(text), [], `${shape} x 250000 holds no secret`);
    t.ok(performance.now() - started < BOUND_MS, `${shape} x 250000 is scanned in linear time`);
  }
});

t.test('glued shapes are still refused and stand-alone ones still found after the run-skipping', async (t) => {
  const jwt = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln';
  const text = `${'eyJ'.repeat(100)} ${jwt} x${'sk-'.repeat(20)} sk-${'a'.repeat(24)} tokentoken password = hunter2hunter2`;
  const found = findSecrets(text).map((m) => text.slice(m.start, m.end));
  t.same(found, [jwt, `sk-${'a'.repeat(24)}`, 'hunter2hunter2']);
  const cards = '+1 4111 1111 1111 1111 and 1-4111111111111111 and 4111111111111111';
  t.same(findBankCards(cards).map((m) => cards.slice(m.start, m.end)), ['4111 1111 1111 1111', '4111111111111111'], 'a "+" glues only its own group; a digit-dash glues the run');
});
