/**
 * Full-width forms (what Chinese input methods type: `１３８`, `＠`, `－`, `Ｘ`) folded to their ASCII
 * letters, digits and signs, and the ideographic space to a space, so that the PII detectors see
 * `13800138000` either way. Each folded character is one UTF-16 unit for one, so offsets in the
 * folded text are offsets in the text, and matches mask the original characters.
 */

// U+FF01..U+FF5E are ASCII U+0021..U+007E shifted by 0xFEE0; U+3000 is the ideographic space.
const WIDE = /[\uff01-\uff5e\u3000]/;
const CHUNK = 8192;

// The detectors of one policy fold the same text in turn: the last result is kept.
let lastText = '';
let lastFolded = '';

/** One UTF-16 unit with a full-width ASCII form as its ASCII character. */
export function foldWidthUnit(code: number): number {
  return code >= 0xff01 && code <= 0xff5e ? code - 0xfee0 : code === 0x3000 ? 0x20 : code;
}

/** `text` with full-width ASCII forms as ASCII (the same string when it holds none). */
export function foldWidth(text: string): string {
  if (text === lastText) return lastFolded;
  let folded = text;
  if (WIDE.test(text)) {
    // Unit by unit into a buffer (a replace callback per character costs ~10x more on long texts).
    const units = new Uint16Array(text.length);
    for (let i = 0; i < text.length; i++) {
      units[i] = foldWidthUnit(text.charCodeAt(i));
    }
    const parts: string[] = [];
    for (let i = 0; i < units.length; i += CHUNK) parts.push(String.fromCharCode(...units.subarray(i, i + CHUNK)));
    folded = parts.join('');
  }
  lastText = text;
  lastFolded = folded;
  return folded;
}
