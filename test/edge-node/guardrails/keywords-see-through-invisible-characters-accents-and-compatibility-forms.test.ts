// The keyword detector reads a keyword written with invisible characters inside it (zero width
// space and joiners, word joiner, BOM, soft hyphen, variation selectors), with its accents
// precomposed or decomposed, or in compatibility forms (mathematical letters, full-width and
// half-width forms, half-width katakana with separate voicing marks) as the keyword, and reports
// the span of the original characters, the invisible ones inside it included: a whole text's mask
// and a stream's, split anywhere, cover them. Case folding keeps its rules (ς, İ, ſ; ı apart).
import t from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import { compileKeywords } from '../../../edge-node/src/guardrails/detectors/keywords.js';
import { policy } from './guardrail-fixtures.js';
import { checkEverySplitMasksAsWhole, maskedWhole, matchedTexts } from './keyword-mask-fixtures.js';

const INVISIBLES: Array<[string, string]> = [
  ['\u200B', 'zero width space'],
  ['\u200C', 'zero width non-joiner'],
  ['\u200D', 'zero width joiner'],
  ['\u2060', 'word joiner'],
  ['\uFEFF', 'zero width no-break space (BOM)'],
  ['\u00AD', 'soft hyphen'],
  ['\uFE0F', 'variation selector 16'],
  ['\u{E0100}', 'variation selector 17'],
  ['\u{E0041}', 'tag letter A'],
];

t.test('invisible characters inside a keyword do not hide it, and the match spans them', async (t) => {
  const find = compileKeywords(['password', '机密']);
  for (const [mark, name] of INVISIBLES) {
    t.same(matchedTexts(find, `my pass${mark}word is x`), [`pass${mark}word`], name);
    t.same(matchedTexts(find, `这是机${mark}${mark}密文件`), [`机${mark}${mark}密`], `${name}, twice, in CJK`);
  }
  t.same(matchedTexts(find, 'p\u200Ba\u200Cs\u200Ds\u2060w\uFEFFo\u00ADr\uFE0Fd'), ['p\u200Ba\u200Cs\u200Ds\u2060w\uFEFFo\u00ADr\uFE0Fd'], 'one after every letter');
  t.same(find('x \u200Bpassword\u200B y'), [{ start: 3, end: 11 }], 'invisible characters around it are not part of the match');
  // Read as if they were not there: they neither split words nor join them.
  t.same(matchedTexts(compileKeywords(['ass']), 'cl\u200Bass, a\u00ADss'), ['a\u00ADss'], '"cl\u200Bass" is "class"');
  t.same(matchedTexts(find, 'pass\u200Bwords and x\u2060password'), [], 'glued to a word through an invisible character');
  t.same(matchedTexts(compileKeywords(['pass\u200Bword']), 'password'), ['password'], 'invisible characters in the list are ignored too');
});

t.test('precomposed and decomposed accents are one writing, in the text and in the list', async (t) => {
  t.same(matchedTexts(compileKeywords(['café']), 'café, cafe\u0301, CAFÉ, CAFE\u0301'), ['café', 'cafe\u0301', 'CAFÉ', 'CAFE\u0301']);
  t.same(matchedTexts(compileKeywords(['cafe\u0301']), 'café, cafe\u0301'), ['café', 'cafe\u0301']);
  t.same(matchedTexts(compileKeywords(['naïve']), 'NAI\u0308VE'), ['NAI\u0308VE']);
  t.same(matchedTexts(compileKeywords(['ガス']), 'ガス カ\u3099ス'), ['ガス', 'カ\u3099ス'], 'katakana with a combining voicing mark');
  // An accent belongs to its letter: a keyword without it is not found in a word with it.
  t.same(matchedTexts(compileKeywords(['cafe']), 'café cafe\u0301 cafe'), ['cafe'], 'e is not é, whichever way é is written');
  t.same(matchedTexts(compileKeywords(['カ']), 'ガ カ\u3099 ｶﾞ カ'), ['カ'], 'カ is not ガ');
  t.same(matchedTexts(compileKeywords(['하']), '한 하'), ['하'], 'a Hangul syllable is not matched by its first half');
});

t.test('compatibility forms: mathematical letters, full-width and half-width forms, half-width katakana', async (t) => {
  const find = compileKeywords(['bomb', 'VPN']);
  t.same(matchedTexts(find, '𝐛𝐨𝐦𝐛, 𝒃𝒐𝒎𝒃, 𝖇𝖔𝖒𝖇, 𝚋𝚘𝚖𝚋, 𝐁𝐎𝐌𝐁, ｂｏｍｂ, 𝐛omb'), ['𝐛𝐨𝐦𝐛', '𝒃𝒐𝒎𝒃', '𝖇𝖔𝖒𝖇', '𝚋𝚘𝚖𝚋', '𝐁𝐎𝐌𝐁', 'ｂｏｍｂ', '𝐛omb']);
  t.same(matchedTexts(find, '𝐛𝐨𝐦𝐛𝐬 x𝐕𝐏𝐍'), [], 'mathematical letters glue words as ASCII ones do');
  t.same(matchedTexts(compileKeywords(['𝐯𝐩𝐧']), 'vpn'), ['vpn'], 'a keyword written in mathematical letters matches ASCII');
  t.same(matchedTexts(compileKeywords(['file']), 'the ﬁle'), ['ﬁle'], 'a ligature is its letters');
  const kana = compileKeywords(['カタカナ', 'パスワード', 'ガス']);
  t.same(matchedTexts(kana, 'ｶﾀｶﾅで書くと'), ['ｶﾀｶﾅ']);
  t.same(matchedTexts(kana, 'ﾊﾟｽﾜｰﾄﾞは秘密、ｶﾞｽ'), ['ﾊﾟｽﾜｰﾄﾞ', 'ｶﾞｽ'], 'half-width voicing marks join their kana');
  t.same(matchedTexts(compileKeywords(['ｶﾞｽ']), 'ガス'), ['ガス'], 'a keyword written half-width matches full-width kana');
  t.same(matchedTexts(kana, 'ｶｽ'), [], 'without its voicing mark it is another word');
});

t.test('case folding keeps its rules next to the new forms', async (t) => {
  t.same(matchedTexts(compileKeywords(['ΚΩΔΙΚΟΣ']), 'ο κωδικος ειναι'), ['κωδικος']);
  t.same(matchedTexts(compileKeywords(['istanbul']), 'İSTANBUL, I\u0307stanbul'), ['İSTANBUL', 'I\u0307stanbul'], 'İ precomposed or decomposed is i');
  t.same(matchedTexts(compileKeywords(['İstanbul']), 'istanbul'), ['istanbul']);
  t.same(matchedTexts(compileKeywords(['password']), 'paſſword'), ['paſſword']);
  t.same(matchedTexts(compileKeywords(['sik']), 'bunu sık sık yaparım'), [], 'the dotless ı is not i');
  t.same(matchedTexts(compileKeywords(['straße']), 'STRAßE strasse'), ['STRAßE']);
  t.same(matchedTexts(compileKeywords(['ΚΩΔΙΚΌΣ']), 'ο κωδικο\u0301ς'), ['κωδικο\u0301ς'], 'final sigma after a decomposed accent');
});

t.test('a match found from a position reads the text before it as context', async (t) => {
  const find = compileKeywords(['password']);
  const text = 'x\u200B\u200Bpassword password';
  t.same(find(text, 3), [{ start: 12, end: 20 }], 'the word before, past invisible characters, glues the first');
  t.same(find('I\u0307password', 2), [], 'a decomposed İ before it is a letter');
  t.same(find('I\u0307\u200B password', 2), [{ start: 4, end: 12 }]);
});

const RULES = policy('keywords-mask', [{ detector: 'keywords', keywords: ['password', 'café', 'cafe', 'ガス', 'bomb', '机密'], action: 'mask', on: 'output' }]);
const FILLER = ' Some ordinary words in between, numbers 2024 and 42, nothing to hide here at all. ';
const ZW = '\u200B'.repeat(24);
const TEXT = [
  FILLER,
  `the p${ZW}ass\u00ADwo\u2060rd is here,`,
  FILLER,
  'café and cafe\u0301 and cafe, ｶﾞｽ and 𝐛𝐨𝐦𝐛 and 机\uFEFF密',
  FILLER,
  `then cafe${ZW}\u0301 and pass${ZW}words end with cafe`,
].join('');

t.test('a whole text is masked over the original characters, the invisible ones inside included', async (t) => {
  const { text, verdicts } = maskedWhole(RULES, TEXT);
  t.equal(
    text,
    [
      FILLER,
      'the [REDACTED] is here,',
      FILLER,
      '[REDACTED] and [REDACTED] and [REDACTED], [REDACTED] and [REDACTED] and [REDACTED]',
      FILLER,
      `then [REDACTED] and pass${ZW}words end with [REDACTED]`,
    ].join(''),
  );
  t.match(verdicts, [{ detector: 'keywords', matches: 9 }]);
  t.ok(`p${ZW}ass\u00ADwo\u2060rd`.length > compilePolicy(RULES).output.window, 'a match longer than the hold-back window');
});

t.test('a stream split at every position, and one code point per delta, masks as the whole text does', async (t) => {
  const expected = maskedWhole(RULES, TEXT);
  await checkEverySplitMasksAsWhole(t, RULES, TEXT, expected);
});
