// Text from a peer (server messages, status details) shown to operators: one line, bounded length.

/** Control characters (newlines included) become spaces, runs collapse, and long text is cut. */
export function oneLine(text: string, maxChars: number): string {
  let out = '';
  for (const ch of text) {
    const code = ch.codePointAt(0) ?? 0;
    out += code < 0x20 || code === 0x7f ? ' ' : ch;
  }
  out = out.replace(/ {2,}/g, ' ').trim();
  return out.length > maxChars ? `${out.slice(0, maxChars)}…` : out;
}
