// The quick test before an answer is searched for the node's key for a tool server: it must flag
// every answer holding the key, or a piece of it of 8 characters or more, in any form an encoder
// writes (else the piece reaches the caller), and it must pass ordinary answers for long keys too
// (a 2 KiB token): the blocks of such a key that hold a '-', '_' or '.' have only two or three
// letters and digits in a row, which any text holds, and once sent every answer to the full parse.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { MIN_SECRET_CHARS, secretPrefilter } from '../../../edge-node/src/providers/mcp/secret-prefilter.js';

/** A deterministic base64url token of `length` characters with a '.' every 200 (a JWT-like key). */
function longToken(length: number): string {
  let seed = 7;
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  let out = '';
  for (let i = 0; i < length; i += 1) {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    out += i % 200 === 199 ? '.' : alphabet[(seed >> 16) % alphabet.length];
  }
  return out;
}

const KEYS = {
  'a short key of letters and digits': 'tsk_4f9a8b7c6d5e4f3a2b1c',
  'a key with characters JSON and HTML escape': 'tk/a&b"c<d>e\'f\\g-h_i.j/k&l',
  'a 2 KiB token with dots, dashes and underscores': longToken(2048),
  'a 1 KiB key in standard base64 (with / and +)': Buffer.from(longToken(768)).toString('base64'),
  'a long token starting with a letter JSON escapes after a backslash': `ntn_${longToken(60)}`,
  'a long token starting with a named HTML entity after &': `lt;a/bcd${longToken(60)}`,
  'a long token starting with n, holding a /': `ntn_a/bc${longToken(60)}`,
  'a long key holding & and \\ (its blocks searched one by one)': `${longToken(100)}&amp;\\u0041${longToken(100)}`,
};

/** HTML5's named character references of the ASCII characters (PHP's htmlentities with ENT_HTML5 writes them). */
const HTML5_NAMED: Record<string, string> = { '/': '&sol;', '+': '&plus;', '.': '&period;', '_': '&lowbar;', '=': '&equals;', '&': '&amp;', '"': '&quot;', '<': '&lt;', '>': '&gt;', "'": '&apos;', '\\': '&bsol;' };

const FORMS: Record<string, (piece: string) => string> = {
  'as written': (piece) => piece,
  'JSON-escaped': (piece) => JSON.stringify(piece).slice(1, -1),
  'escaped \\u00XX': (piece) => piece.replace(/[^A-Za-z0-9]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0').toUpperCase()}`),
  'HTML-escaped': (piece) => piece.replace(/[^A-Za-z0-9]/g, (c) => `&#x${c.charCodeAt(0).toString(16)};`),
  'HTML-escaped in decimal, zero-padded': (piece) => piece.replace(/[^A-Za-z0-9]/g, (c) => `&#000${c.charCodeAt(0)};`),
  'after a backslash in text that is not JSON': (piece) => `C:\\${piece}`,
  // Decoding one kind of escape must not eat the key as written next to a stray & or \.
  'JSON-escaped / after a stray &': (piece) => `&${piece.replaceAll('/', '\\/')}`,
  'HTML-escaped after a backslash': (piece) => `C:\\${piece.replace(/[^A-Za-z0-9]/g, (c) => `&#${c.charCodeAt(0)};`)}`,
  // A JSON text carried in a JSON string (a tool's result that is a JSON dump): each escape escaped again.
  'JSON-escaped twice': (piece) => JSON.stringify(JSON.stringify(piece).slice(1, -1)).slice(1, -1),
  // PHP's json_encode writes '/' as '\/' at both levels: '\/' becomes '\\\/'.
  'JSON-escaped twice, / as \\/ each time': (piece) => JSON.stringify(JSON.stringify(piece).slice(1, -1).replaceAll('/', '\\/')).slice(1, -1).replaceAll('/', '\\/'),
  // The second level writing the first level's escapes' characters as \u00XX ('\"' becomes '\u005c\u0022').
  'JSON-escaped, then escaped \\u00XX': (piece) => JSON.stringify(piece).slice(1, -1).replace(/[^A-Za-z0-9]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`),
  'escaped \\u00XX, then JSON-escaped': (piece) => JSON.stringify(piece.replace(/[^A-Za-z0-9]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)).slice(1, -1),
  // An escape the key's characters have no part in is read as written: a stray & or \ before a piece
  // that starts like one's end (lt;…, n…) must not eat it when an escape inside the piece is decoded.
  'HTML-escaped / after a stray &': (piece) => `&${piece.replaceAll('/', '&#x2F;')}`,
  // PHP's htmlentities(…, ENT_HTML5): a name wherever HTML5 has one (`&sol;`, `&period;`, `&plus;`).
  'HTML5 named references': (piece) => piece.replace(/[^A-Za-z0-9]/g, (c) => HTML5_NAMED[c] ?? `&#${c.charCodeAt(0)};`),
  // Go's html/template then encoding/json: the HTML escape's & written \u0026 (`\u0026#43;`).
  'HTML-escaped, its & then JSON-escaped': (piece) => piece.replace(/[^A-Za-z0-9]/g, (c) => (c === '&' ? '\\u0026amp;' : `\\u0026#${c.charCodeAt(0)};`)),
  'HTML-escaped, its & then JSON-escaped twice': (piece) => piece.replace(/[^A-Za-z0-9]/g, (c) => `\\\\u0026#${c.charCodeAt(0)};`),
  'JSON-escaped / after a stray backslash': (piece) => `\\${piece.replaceAll('/', '\\/')}`,
};

for (const [what, key] of Object.entries(KEYS)) {
  t.test(`${what}: every piece of ${MIN_SECRET_CHARS} characters, in every form, is flagged`, async (t) => {
    const prefilter = secretPrefilter(key);
    let missed = 0;
    let tried = 0;
    for (let at = 0; at + MIN_SECRET_CHARS <= key.length; at += 1) {
      const piece = key.slice(at, at + MIN_SECRET_CHARS);
      for (const write of Object.values(FORMS)) {
        tried += 1;
        if (!prefilter.mayHold(Buffer.from(`{"log":"header was ${write(piece)} then"}`, 'latin1'))) missed += 1;
      }
    }
    t.equal(missed, 0, `none of the ${tried} missed`);
    t.ok(prefilter.mayHold(Buffer.from(`x ${key} y`)), 'the whole key');
  });
}

t.test('ordinary answers of any size are passed for a 2 KiB token, and for a short key', async (t) => {
  const words = 'the quick brown fox jumps over a lazy dog 42 times; results: [ok, ok, no] id-7 a_b x.y'.split(' ');
  let text = '';
  for (let i = 0; text.length < 64 * 1024; i += 1) text += `${words[(i * 7) % words.length]} `;
  const body = Buffer.from(JSON.stringify({ content: [{ type: 'text', text }], hex: randomBytes(64).toString('hex') }));
  // An image a tool returns, in base64: it holds most runs of three letters and digits.
  let seed = 99;
  const png = Buffer.alloc(48 * 1024);
  for (let i = 0; i < png.length; i += 1) {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    png[i] = (seed >> 16) & 255;
  }
  const image = Buffer.from(JSON.stringify({ content: [{ type: 'image', mimeType: 'image/png', data: png.toString('base64') }] }));
  for (const [what, key] of Object.entries(KEYS)) {
    t.notOk(secretPrefilter(key).mayHold(body), `${what}: text`);
    t.notOk(secretPrefilter(key).mayHold(image), `${what}: an image in base64`);
  }
});

t.test('a key holding half of a character past U+FFFF in one of its blocks flags every answer rather than miss one', async (t) => {
  const prefilter = secretPrefilter('key-with-😀-emoji-inside');
  t.ok(prefilter.mayHold(Buffer.from('ordinary text with nothing in it')));
  t.notOk(prefilter.mayHold(Buffer.from('short')), 'shorter than any piece');
});
