/**
 * A cheap token estimate for text the upstream did not count (limits, pre-authorisation, usage
 * when the upstream sends none): about four characters per token for Latin text, and one token per
 * CJK character, rounded up. Deliberately simple and fast; records say when usage was estimated.
 */
const CJK = /[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]/g;

export function estimateTokens(text: string): number {
  if (text.length === 0) return 0;
  const cjk = text.match(CJK)?.length ?? 0;
  return cjk + Math.ceil((text.length - cjk) / 4);
}
