// The keyword detector reads through decorative combining marks, which make no letter (underline
// U+0332, strike-through U+0336, overlays, enclosing marks, marks for symbols U+20D0–U+20FF, half
// marks U+FE20–U+FE2F): `v̲p̲n̲` is `vpn`, and the match (so a mask) takes in the marks on its last
// letter. Accents stay significant (an accent belongs to its letter), but two or more marks on one
// letter are compared in canonical order, composed or not: `Vie\u0302\u0323t` is `Việt`. A whole
// text's mask and a stream's, split anywhere (between a letter and its mark too), agree.
import t from 'tap';
import { compileKeywords } from '../../../edge-node/src/guardrails/detectors/keywords.js';
import { policy } from './guardrail-fixtures.js';
import { checkEverySplitMasksAsWhole, maskedStreamed, maskedWhole, matchedTexts } from './keyword-mask-fixtures.js';
/** `word` with `mark` after each of its letters. */
const marked = (word: string, mark: string): string => [...word].map((c) => c + mark).join('');

const DECORATIVE: Array<[string, string]> = [
  ['\u0332', 'low line (underline)'],
  ['\u0333', 'double low line'],
  ['\u0336', 'long stroke overlay (strike-through)'],
  ['\u0335', 'short stroke overlay'],
  ['\u0334', 'tilde overlay'],
  ['\u0337', 'short solidus overlay'],
  ['\u0305', 'overline'],
  ['\u20D0', 'left harpoon above (marks for symbols)'],
  ['\u20D2', 'long vertical line overlay'],
  ['\u20E5', 'reverse solidus overlay'],
  ['\u20DD', 'enclosing circle (Me)'],
  ['\u20E3', 'enclosing keycap (Me)'],
  ['\u0489', 'Cyrillic millions sign (Me)'],
  ['\uFE20', 'ligature left half (half marks)'],
  ['\uFE26', 'conjoining macron'],
];

t.test('decorative marks on every letter of a keyword do not hide it, and the match takes in the last one', async (t) => {
  const find = compileKeywords(['vpn', '机密']);
  for (const [mark, name] of DECORATIVE) {
    const word = marked('vpn', mark);
    t.same(matchedTexts(find, `use ${word} now`), [word], name);
    t.same(matchedTexts(find, `use ${marked('VPN', mark)}.`), [marked('VPN', mark)], `${name}, capitals`);
    t.same(matchedTexts(find, `这是${marked('机密', mark)}文件`), [marked('机密', mark)], `${name}, in CJK`);
    t.same(matchedTexts(find, `v${mark}${mark}${mark}pn`), [`v${mark}${mark}${mark}pn`], `${name}, three on one letter`);
  }
  t.same(matchedTexts(find, 'v\u0332\u0336\u20DDp\uFE20\uFE21n\u0305'), ['v\u0332\u0336\u20DDp\uFE20\uFE21n\u0305'], 'several kinds mixed');
  t.same(matchedTexts(find, 'v\u0332\u200Bp\u200B\u0336n\u0336\u200B!'), ['v\u0332\u200Bp\u200B\u0336n\u0336'], 'among invisible characters; one after the marks stays outside');
  t.same(matchedTexts(compileKeywords([marked('vpn', '\u0332')]), 'a vpn'), ['vpn'], 'decorative marks in the list are read through too');
  t.same(matchedTexts(find, 'x v\u0332p\u0332n\u0332 y'), ['v\u0332p\u0332n\u0332'], 'whole words still');
});

t.test('a word merely carrying marks is not a keyword, and a mark next to a keyword does not join it', async (t) => {
  const find = compileKeywords(['vpn', '机密']);
  t.same(matchedTexts(find, marked('vpns', '\u0332')), [], 'a longer word');
  t.same(matchedTexts(find, marked('xvpn', '\u0336')), [], 'a word before it, glued through its mark');
  t.same(matchedTexts(find, marked('vpm', '\u0332')), [], 'another word');
  t.same(matchedTexts(find, `${marked('vp', '\u0332')} ${marked('n', '\u0332')}`), [], 'a space still separates letters');
  t.same(find('a\u0332 vpn b\u0332'), [{ start: 3, end: 6 }], 'marks on neighbouring words stay outside');
  t.same(find('这\u0332机密文\u0332件'), [{ start: 2, end: 4 }], 'the mark on the character before stays with it, the one after the match is another character\u2019s');
  // Accents make letters: they stay significant (README, "Keywords as written").
  t.same(matchedTexts(find, 'v\u0303p\u0303n\u0303 \u1E7Dp\u0303\u00F1 vp\u00F1'), [], 'a tilde makes another letter (ñ is not n)');
  t.same(matchedTexts(compileKeywords(['cafe']), 'café cafe\u0301 ca\u0332fe\u0332\u0301 cafe\u0332'), ['cafe\u0332'], 'an accent after a decorative mark still belongs to the letter');
  t.same(matchedTexts(compileKeywords(['café']), 'cafe\u0332 ca\u0332fe\u0332\u0301'), ['ca\u0332fe\u0332\u0301'], 'a keyword with an accent needs it');
  // U+0338 is no decoration: `≠` is `=` + U+0338.
  t.same(matchedTexts(compileKeywords(['a=b']), 'a\u2260b a=\u0338b a=b'), ['a=b'], '≠ is not =');
});

t.test('stacked marks on one letter match in any order, composed or decomposed', async (t) => {
  // ệ is e + U+0323 (dot below, class 220) + U+0302 (circumflex, class 230).
  const forms = ['Vi\u1EC7t', 'Vie\u0323\u0302t', 'Vie\u0302\u0323t', 'Vi\u00EA\u0323t', 'Vi\u1EB9\u0302t', 'VIE\u0302\u0323T', 'Vie\u0302\u200B\u0323t', 'Vie\u0302\u0332\u0323t'];
  for (const keyword of ['Việt', 'Vie\u0302\u0323t', 'vie\u0323\u0302t']) {
    const find = compileKeywords([keyword]);
    t.same(matchedTexts(find, forms.join(' ')), forms, `keyword ${JSON.stringify(keyword)}`);
    t.same(matchedTexts(find, 'Viet Vi\u00EAt Vi\u1EB9t Vie\u0302\u0323\u0301t Vi\u1EC7\u0300t'), [], `${JSON.stringify(keyword)}: a mark missing or one more is another word`);
  }
  t.same(matchedTexts(compileKeywords(['Viêt']), 'Vi\u1EC7t Vie\u0302\u0323t'), [], 'a keyword without the dot below does not find it');
  // ờ is o + U+031B (horn, class 216) + U+0300 (grave, class 230); the grave may come first.
  const nguoi = compileKeywords(['người']);
  const written = ['ngu\u031Bo\u031B\u0300i', 'ngu\u031Bo\u0300\u031Bi', 'ngu\u031B\u00F2\u031Bi', 'NGƯỜI', 'ngư\u1EDDi'];
  t.same(matchedTexts(nguoi, written.join(' ')), written);
  t.same(matchedTexts(nguoi, 'nguoi ngươi ngu\u0300\u031Bo\u031Bi'), [], 'the grave on another letter is another word');
  t.same(matchedTexts(compileKeywords(['ạ́']), 'a\u0301\u0323 a\u0323\u0301 \u00E1\u0323 \u1EA1\u0301 a\u0301'), ['a\u0301\u0323', 'a\u0323\u0301', '\u00E1\u0323', '\u1EA1\u0301'], 'a letter alone');
});

const RULES = policy('keywords-marks-mask', [{ detector: 'keywords', keywords: ['vpn', 'Việt', 'café', '机密'], action: 'mask', on: 'output' }]);
const FILLER = ' Some ordinary words in between, numbers 2024 and 42, nothing to hide here at all. ';
const ZW = '\u200B'.repeat(12);
const TEXT = [
  FILLER,
  `use ${marked('vpn', '\u0332')}, ${marked('VPN', '\u0336\u0336')} or v\u20DDp\u20DDn\u20DD; not ${marked('vpns', '\u0332')} nor v\u0303p\u0303n\u0303`,
  FILLER,
  `Vie\u0302\u0323t and Vie\u0302${ZW}\u0323t and Viê\u0323t, not Viêt; ${marked('机密', '\u0332')}文件, cafe\u0332\u0301 and cafe\u0332`,
  FILLER,
].join('');

t.test('a whole text is masked over the letters and their marks', async (t) => {
  const { text, verdicts } = maskedWhole(RULES, TEXT);
  t.equal(
    text,
    [
      FILLER,
      `use [REDACTED], [REDACTED] or [REDACTED]; not ${marked('vpns', '\u0332')} nor v\u0303p\u0303n\u0303`,
      FILLER,
      `[REDACTED] and [REDACTED] and [REDACTED], not Viêt; [REDACTED]文件, [REDACTED] and cafe\u0332`,
      FILLER,
    ].join(''),
  );
  t.match(verdicts, [{ detector: 'keywords', matches: 8 }]);
});

t.test('a stream split between a letter and its mark, at every position, and one code point per delta, masks as the whole text does', async (t) => {
  const expected = maskedWhole(RULES, TEXT);
  for (const deltas of [
    ['use vp', 'n', '\u0332 now'],
    ['use v\u0332p\u0332n', '\u0332', ' now'],
    ['Vie\u0302', '\u0323t.'],
    [`Vie\u0302${ZW}`, '\u0323t.'],
  ]) {
    const whole = maskedWhole(RULES, deltas.join(''));
    t.match(whole.text, /^\S* ?\[REDACTED\]/, `${JSON.stringify(deltas)} is masked whole`);
    t.equal((await maskedStreamed(RULES, deltas)).text, whole.text, JSON.stringify(deltas));
  }
  await checkEverySplitMasksAsWhole(t, RULES, TEXT, expected);
});
