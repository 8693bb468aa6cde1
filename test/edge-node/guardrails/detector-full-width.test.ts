// The PII detectors read full-width digits, letters and signs (what Chinese input methods type) as
// their ASCII forms, with the same checksums, and mask the original characters.
import t from 'tap';
import { findBankCards } from '../../../edge-node/src/guardrails/detectors/bank-card.js';
import type { Match } from '../../../edge-node/src/guardrails/detectors/detector.js';
import { findEmails } from '../../../edge-node/src/guardrails/detectors/email.js';
import { findPhones } from '../../../edge-node/src/guardrails/detectors/phone.js';
import { findPrcResidentIds } from '../../../edge-node/src/guardrails/detectors/prc-resident-id.js';

type Find = (text: string, from?: number) => Match[];
const found = (find: Find, text: string): string[] => find(text).map((m) => text.slice(m.start, m.end));

t.test('full-width phone numbers, IDs, cards and e-mail addresses are found and sliced from the original', async (t) => {
  t.same(found(findPhones, '手机１３８００１３８０００，请回电'), ['１３８００１３８０００']);
  t.same(found(findPhones, '（＋８６）１３８ ００１３ ８０００'), ['（＋８６）１３８ ００１３ ８０００']);
  t.same(found(findPrcResidentIds, '身份证１１０１０５１９４９１２３１００２Ｘ。'), ['１１０１０５１９４９１２３１００２Ｘ']);
  t.same(found(findBankCards, '卡号４１１１　１１１１　１１１１　１１１１'), ['４１１１　１１１１　１１１１　１１１１'], 'ideographic spaces between groups');
  t.same(found(findEmails, '邮箱ｚｈａｎｇ．ｓａｎ＠ｅｘａｍｐｌｅ．ｃｏｍ。'), ['ｚｈａｎｇ．ｓａｎ＠ｅｘａｍｐｌｅ．ｃｏｍ']);
});

t.test('checksums still decide for full-width forms', async (t) => {
  t.same(found(findPrcResidentIds, '１１０１０５１９４９１２３１００２Ｙ'), [], 'wrong check character');
  t.same(found(findBankCards, '４１１１ １１１１ １１１１ １１１２'), [], 'fails Luhn');
  t.same(found(findPhones, '１２８００１３８０００'), [], 'not a mobile prefix');
});

t.test('a PRC resident ID grouped 6-8-4 with dashes is found; one glued to a longer run is not', async (t) => {
  t.same(found(findPrcResidentIds, 'ID 110105-19491231-002X ok'), ['110105-19491231-002X']);
  t.same(found(findPrcResidentIds, '9-110105-19491231-002X 110105-19491231-002X-1'), []);
});
