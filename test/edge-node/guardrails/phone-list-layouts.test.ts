// Numbered lists of mobiles laid out as people write them are found as list items: an item with a
// continuation line before the next, a column aligned with a tab or 4 spaces after the number, two
// CRLF blank lines between items, and an excerpt starting at item 2 after a heading line ending in a
// colon. The plain-list rule read only the line just above (4 line breaks at most) and at most 3
// blanks after the number, so these went out unmasked; decimals alone on their lines stay
// unmasked, and streams decide as the whole text.
import t from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import type { PolicySide } from '../../../edge-node/src/guardrails/compiled-policy.js';
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

t.test('list items with continuation lines, aligned columns, CRLF blank lines or a heading are found', async (t) => {
  t.same(phones('1.张三\n  备注：值班\n2.13912345678'), ['13912345678'], 'a continuation line of the item before');
  t.same(phones('1.张三\n  备注：值班\n  分机：无\n2.13912345678'), ['13912345678'], 'two continuation lines');
  t.same(phones('名单\n2.13912345678    张三'), ['13912345678'], 'a column aligned with 4 spaces');
  t.same(phones('名单\n2.13912345678\t张三'), ['13912345678'], 'a column aligned with a tab');
  t.same(phones('1.张三\r\n\r\n\r\n2.13912345678'), ['13912345678'], 'two CRLF blank lines between items');
  t.same(phones('以下号码：\n2.13912345678'), ['13912345678'], 'an excerpt from item 2 after a heading (full-width colon)');
  t.same(phones('Numbers:\n2.13912345678'), ['13912345678'], 'after a heading (ASCII colon)');
});

t.test('decimals stay unmasked: alone, after a heading, after an item not numbered one less', async (t) => {
  t.same(phones('3.14159265358'), [], 'pi alone');
  t.same(phones('Values, one per line:\n3.14159265358'), [], 'a decimal after a heading is no item of an excerpt');
  t.same(phones('1.张三\n  note\n3.14159265358'), [], 'the nearest item is not numbered one less');
  t.same(phones('2.5\n3.14159265358'), [], 'a decimal above is no item');
  t.same(phones(`1.${'张'.repeat(50)}\n2.13912345678`), [], 'a line before that starts past the look-back is no evidence');
});

t.test('the new layouts streamed in pieces are masked as the whole text, decimals beside them are not', async (t) => {
  const text =
    '以下号码：\n2.13912345678\n3.13812345678    张三\n4.15012345678\t李四\r\n\r\n\r\n5.13612345678\n' +
    '  备注：值班\n  分机：无\n6.13712345678\nValues:\n3.14159265358\n2.5\n3.14159265358\nend';
  const expected =
    '以下号码：\n2.[PHONE]\n3.[PHONE]    张三\n4.[PHONE]\t李四\r\n\r\n\r\n5.[PHONE]\n' +
    '  备注：值班\n  分机：无\n6.[PHONE]\nValues:\n3.14159265358\n2.5\n3.14159265358\nend';
  t.equal(whole(DIGITS, text), expected);
  let failures = 0;
  const check = (deltas: string[], how: string, want = expected): void => {
    const got = streamed(DIGITS, deltas);
    if (got === want) return;
    if (++failures <= 3) t.fail(how, { got });
  };
  for (let i = 0; i <= text.length; i++) check([text.slice(0, i), text.slice(i)], `split at ${i}`);
  for (let i = 0; i <= text.length; i += 5) for (let j = i; j <= text.length; j += 5) check([text.slice(0, i), text.slice(i, j), text.slice(j)], `split at ${i}, ${j}`);
  for (let size = 1; size <= 16; size++) {
    const deltas: string[] = [];
    for (let at = 0; at < text.length; at += size) deltas.push(text.slice(at, at + size));
    check(deltas, `deltas of ${size}`);
  }
  // A long prefix makes the guard release text before the list: the look-back reads its context.
  const long = `${'Some words before the list. '.repeat(20)}\n${text}`;
  const longExpected = `${'Some words before the list. '.repeat(20)}\n${expected}`;
  for (let size = 1; size <= 40; size += 3) {
    const deltas: string[] = [];
    for (let at = 0; at < long.length; at += size) deltas.push(long.slice(at, at + size));
    check(deltas, `after a long prefix, deltas of ${size}`, longExpected);
  }
  t.equal(whole(DIGITS, long), longExpected);
  t.equal(failures, 0, 'every split');
});
