/**
 * A cheap token estimate for text the upstream did not count (limits, pre-authorisation, usage
 * when the upstream sends none): about four characters per token for ASCII text, one token per
 * CJK character, one per two other characters outside ASCII (Cyrillic, Greek, Thai, Devanagari,
 * Arabic, accented letters, symbols), and one per UTF-16 unit of a character beyond the BMP (an
 * emoji: two), rounded up. BPE vocabularies hold few merges for scripts other than Latin and CJK
 * (Thai and Devanagari run near a token per character in cl100k and Llama's), and an emoji is
 * often two to four tokens: at four characters per token those were estimated at a quarter or
 * less, and pre-authorised and limited as such. Deliberately simple and fast (ASCII text: one
 * regex test); records say when usage was estimated.
 */
const CJK = /[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]/g;
const NOT_ASCII = /[\u0080-\uffff]/;
const NOT_ASCII_ALL = /[\u0080-\uffff]/g;
const SURROGATE = /[\ud800-\udfff]/g;

export function estimateTokens(text: string): number {
  if (text.length === 0) return 0;
  return tokensForCharacters(text.length, denseTextWeight(text));
}

/**
 * What `text` weighs beyond four characters per token, in quarter tokens: 3 per CJK character and
 * per surrogate (1 token each), 1 per other character outside ASCII (half a token); 0 for ASCII.
 * For an estimate of text counted in pieces (tokensForCharacters).
 */
export function denseTextWeight(text: string): number {
  if (!NOT_ASCII.test(text)) return 0;
  const outside = text.match(NOT_ASCII_ALL)?.length ?? 0;
  const full = (text.match(CJK)?.length ?? 0) + (text.match(SURROGATE)?.length ?? 0);
  return 3 * full + (outside - full);
}

/** estimateTokens of a text `length` characters (UTF-16 units) long whose denseTextWeight is `dense`, without the text. */
export function tokensForCharacters(length: number, dense: number): number {
  return Math.ceil((length + dense) / 4);
}
