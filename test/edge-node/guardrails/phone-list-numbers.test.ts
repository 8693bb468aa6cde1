// A numbered list written without a space after the dot (`1.13812345678`) has its mobile number
// found at the start of a line, while fractions (JSON scores, indented arrays, CSV rows, numbers
// within a line, a decimal alone on its line such as 3.14159265358) stay unmasked, and streams mask
// the list as the whole text does.
import t from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import type { PolicySide } from '../../../edge-node/src/guardrails/compiled-policy.js';
import { findBankCards } from '../../../edge-node/src/guardrails/detectors/bank-card.js';
import { findPhones } from '../../../edge-node/src/guardrails/detectors/phone.js';
import { TextGuard, VerdictTally } from '../../../edge-node/src/guardrails/text-guard.js';
import { policy } from './guardrail-fixtures.js';

const phones = (text: string): string[] => findPhones(text).map((m) => text.slice(m.start, m.end));
const DIGITS = compilePolicy(
  policy('digits', [
    { detector: 'phone', action: 'mask', on: 'output' },
    { detector: 'bank-card', action: 'mask', on: 'output' },
  ]),
).output;

function whole(side: PolicySide, text: string): string {
  return new TextGuard(side, new VerdictTally('p', 'output', [])).whole(text);
}

function streamed(side: PolicySide, deltas: string[]): string {
  const guard = new TextGuard(side, new VerdictTally('p', 'output', []));
  return deltas.map((d) => guard.push(d)).join('') + guard.end();
}

t.test('a mobile number glued to its list number at the start of a line is found', async (t) => {
  t.same(phones('1.13812345678'), ['13812345678']);
  t.same(
    phones('联系人：\n1.13812345678\n2.13912345678 张三\n10.15012345678，李四\n100.138 1234 5678\r\n3.+86 13812345678\n4.13812345678, Zhang'),
    ['13812345678', '13912345678', '15012345678', '138 1234 5678', '+86 13812345678', '13812345678'],
    'numbered 1 to 100, grouped, with +86, a full-width comma and a comma in prose after it',
  );
  t.same(phones('１.１３８１２３４５６７８'), ['１３８１２３４５６７８'], 'full-width');
});

t.test('fractions stay unmasked: scores, indented arrays, CSV rows, numbers within a line, more decimals', async (t) => {
  t.same(phones('0.13812345678\n01.13812345678\n1000.13812345678'), [], 'a zero, a leading zero, four digits before the dot');
  t.same(phones('[\n  1.13812345678,\n  2.5\n]'), [], 'an indented JSON array');
  t.same(phones('1.13812345678,8.52\n2.13912345678, -0.5'), [], 'a CSV row');
  t.same(phones('{"p":0.14680662540,"x":47.18860501045} and 1.13812345678, score 2.13812345678'), [], 'within a line');
  t.same(phones('1.138123456789\n1.13812345678.5\n1.13812345678-2'), [], 'more digits after it');
  const scores = '0.4532015112830366\n1.4532015112830366\n{"score":0.4532015112830366}';
  t.same(findBankCards(scores), [], 'a double printed alone on its line is no card, after 0 or another number');
  t.equal(whole(DIGITS, scores), scores);
});

t.test('a numbered list of mobiles streamed in pieces is masked as the whole text, fractions beside it are not', async (t) => {
  const text =
    'Here is the list of contacts you asked for, one per line as requested:\n' +
    '1.13812345678\n2.13912345678 张三\n10.15012345678，李四\n3.138 1234 5678\n' +
    '{"scores": [0.4532015112830366, 0.14680662540]}\n47.5,1.13812345678\n1.13812345678,8.52\nend';
  const expected =
    'Here is the list of contacts you asked for, one per line as requested:\n' +
    '1.[PHONE]\n2.[PHONE] 张三\n10.[PHONE]，李四\n3.[PHONE]\n' +
    '{"scores": [0.4532015112830366, 0.14680662540]}\n47.5,1.13812345678\n1.13812345678,8.52\nend';
  t.equal(whole(DIGITS, text), expected);
  let failures = 0;
  const check = (deltas: string[], how: string): void => {
    const got = streamed(DIGITS, deltas);
    if (got === expected) return;
    failures++;
    if (failures <= 3) t.fail(how, { got });
  };
  for (let i = 0; i <= text.length; i++) check([text.slice(0, i), text.slice(i)], `split at ${i}`);
  for (let i = 0; i <= text.length; i += 7) for (let j = i; j <= text.length; j += 7) check([text.slice(0, i), text.slice(i, j), text.slice(j)], `split at ${i}, ${j}`);
  for (let size = 1; size <= 16; size++) {
    const deltas: string[] = [];
    for (let at = 0; at < text.length; at += size) deltas.push(text.slice(at, at + size));
    check(deltas, `deltas of ${size}`);
  }
  t.equal(failures, 0, 'every split');
});

t.test('a decimal alone on its line is no list item: only list number 1, text after it or the item before it on the line above make one', async (t) => {
  t.same(phones('3.14159265358'), [], 'pi alone on its line');
  t.same(phones('π is about\n3.14159265358\nand a column:\n2.5\n3.14159265358\n3.14159265358\n12.15012345678'), [], 'after prose, after a decimal, after a line not numbered one less');
  t.same(phones('0.13812345678'), [], 'no list starts at 0');
  t.same(phones('1.13812345678'), ['13812345678'], 'a first item');
  t.same(phones('1.13812345678\n2.13912345678\n\n3.15012345678'), ['13812345678', '13912345678', '15012345678'], 'each item after an item line, a blank line between too');
  t.same(phones('联系人：\n1.张三\n2.13912345678\r\n3.+86 13812345678\n4.15012345678'), ['13912345678', '+86 13812345678', '15012345678'], 'after the item before it, starting with text or +86');
  t.same(phones('see:\n3.13812345678 张三\n7.13912345678，李四'), ['13812345678', '13912345678'], 'text after it on its line');
  t.same(phones('3.138 1234 5678\n5.+8613912345678'), ['138 1234 5678', '+8613912345678'], 'grouped or with +86: no decimal is written so');
  t.same(phones(`1.${'张'.repeat(50)}\n2.13912345678`), [], 'the line before longer than 46 characters is no evidence, in a stream as in the whole text');
});

t.test('decimals alone on their lines stay unmasked streamed in pieces as in the whole text, list items beside them are masked', async (t) => {
  const text =
    'Values, one per line:\n3.14159265358\n2.5\n3.14159265358\n47.18860501045\n' +
    'Contacts:\n1.13812345678\n2.13912345678\n\n3.15012345678\n4.13812345678 张三\n' +
    `1.${'长'.repeat(50)}\n2.13912345678\nend`;
  const expected =
    'Values, one per line:\n3.14159265358\n2.5\n3.14159265358\n47.18860501045\n' +
    'Contacts:\n1.[PHONE]\n2.[PHONE]\n\n3.[PHONE]\n4.[PHONE] 张三\n' +
    `1.${'长'.repeat(50)}\n2.13912345678\nend`;
  t.equal(whole(DIGITS, text), expected);
  let failures = 0;
  const check = (deltas: string[], how: string): void => {
    const got = streamed(DIGITS, deltas);
    if (got === expected) return;
    failures++;
    if (failures <= 3) t.fail(how, { got });
  };
  for (let i = 0; i <= text.length; i++) check([text.slice(0, i), text.slice(i)], `split at ${i}`);
  for (let i = 0; i <= text.length; i += 7) for (let j = i; j <= text.length; j += 7) check([text.slice(0, i), text.slice(i, j), text.slice(j)], `split at ${i}, ${j}`);
  for (let size = 1; size <= 16; size++) {
    const deltas: string[] = [];
    for (let at = 0; at < text.length; at += size) deltas.push(text.slice(at, at + size));
    check(deltas, `deltas of ${size}`);
  }
  t.equal(failures, 0, 'every split');
});
