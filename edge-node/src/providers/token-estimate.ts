/**
 * A cheap token estimate for text the upstream did not count (limits, pre-authorisation, usage
 * when the upstream sends none): about four characters per token for Latin text, and one token per
 * CJK character, rounded up. Deliberately simple and fast; records say when usage was estimated.
 */
const CJK = /[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]/g;

export function estimateTokens(text: string): number {
  if (text.length === 0) return 0;
  return tokensForCharacters(text.length, cjkCharacters(text));
}

/** The CJK characters in `text`, for an estimate of text counted in pieces (tokensForCharacters). */
export function cjkCharacters(text: string): number {
  return text.match(CJK)?.length ?? 0;
}

/** estimateTokens of a text `length` characters long, `cjk` of them CJK, without the text. */
export function tokensForCharacters(length: number, cjk: number): number {
  return cjk + Math.ceil((length - cjk) / 4);
}
