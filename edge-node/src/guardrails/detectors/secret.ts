// Credential shapes: provider API keys (OpenAI, Anthropic, AWS, GitHub, Slack, Google), PEM private
// key blocks, JWTs, and generic assignments such as `api_key = "…"` / `password: …` / `密码：…`.
import { mergeMatches, regexMatches } from './detector.js';
import type { Detector, Match } from './detector.js';

// Token-shaped secrets, each required to stand alone (not glued to more token characters).
// (The left boundary is checked after a hit, not in a lookbehind: a pattern that starts with
// literals lets the regex engine skip quickly through text that holds none. A refused hit skips its
// whole token run, so a run is scanned once. The JWT alone needs the lookbehind: it can fail after
// consuming a run (no dot), and without it every "eyJ" inside the run would scan the run again.)
const SHAPED = new RegExp(
  '(?:' +
    [
      'sk-ant-[A-Za-z0-9_-]{20,}', // Anthropic
      'sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}', // OpenAI
      '(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])', // AWS access key id
      'gh[pousr]_[A-Za-z0-9]{36,}', // GitHub tokens
      'github_pat_[A-Za-z0-9_]{22,}', // GitHub fine-grained PAT
      'xox[abprs]-[A-Za-z0-9-]{10,}', // Slack
      'AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])', // Google API key
      '(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}\\.eyJ[A-Za-z0-9_-]{4,}\\.[A-Za-z0-9_-]*', // JWT (signature may be empty: alg none)
    ].join('|') +
    ')',
  'g',
);

// A PEM private key block; an unterminated one is masked to the end of the text (fail safe).
const PEM = /-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|$)/g;

// `name = value` where the name says secret; the value (8+ characters, not all digits) is the match.
// The scan looks for the telling word first (cheap), then for the rest of the name, the separator
// and the value right after it. A quoted value runs to its closing quote (a passphrase has spaces),
// up to QUOTED_MAX characters (so a stream guard's window still holds it whole); an unquoted one
// ends at a space, a straight quote or ASCII punctuation, at CJK punctuation once it has its 8
// characters (`密码：Tmp2024ab，有效期…` ends at the comma; a shorter run goes on, so
// `api_key=sk-ab，cdefghijklmnop` is still masked), and at a typographic closing quote only when it
// closes the quote the value opened with (`Don’tTellAnyone42` is one value).
const SECRET_WORD = /api[_-]?key|secret|token|passw(?:or)?d|pwd|credential|密码|口令|密钥|令牌/giu;
const QUOTED_MAX = 96;
// Straight quotes and the typographic ones word processors and Chinese input methods type.
const QUOTE_PAIRS = [['"', '"'], ["'", "'"], ['“', '”'], ['‘', '’'], ['「', '」'], ['『', '』']] as const;
const OPEN_QUOTES = QUOTE_PAIRS.map(([open]) => open).join('');
const CLOSE_QUOTES = QUOTE_PAIRS.map(([, close]) => close).join('');
// What always ends an unquoted value (`\s` covers U+3000).
const VALUE_ENDS = '\\s"\'`,;';
// What ends an unquoted value of 8+ characters before it; a shorter one runs on to a VALUE_ENDS.
const VALUE_BREAKS = '，。；：、！？）】」』“‘「『';
/** An unquoted value (its capture group); `close`: the closing quote of the quote it opened with. */
function unquotedValue(close: string): string {
  return `([^${VALUE_ENDS}${VALUE_BREAKS}${close}]{8,}|[^${VALUE_ENDS}${close}]{8,})`;
}
// The rest of a name and the blanks around its separator (unbounded: a whole text finds any). A
// stream guard holds a name with its value (Match.holdFrom) once the value is found, so a name and
// the value's first 8 characters within the stream window (secretWindow) are never released apart;
// a longer gap between them may be (known limit, guardrails/README.md).
const NAME_TAIL = '[A-Za-z0-9_.-]*';
const BLANKS = '\\s*';
const ASSIGNED_VALUE = new RegExp(
  `${NAME_TAIL}[${CLOSE_QUOTES}]?${BLANKS}[:=：]${BLANKS}(?:` +
    QUOTE_PAIRS.map(([open, close]) => `${open}([^${close}\\n]{8,${QUOTED_MAX}})${close}`).join('|') +
    '|' +
    QUOTE_PAIRS.map(([open, close]) => `${open}${unquotedValue(close)}`).join('|') +
    `|(?![${OPEN_QUOTES}])${unquotedValue('')})`,
  'uy',
);
// The rest of a name: a failed value match was decided by what follows this run, so every word
// inside the same run fails the same way and is skipped (glued words would otherwise rescan it).
const NAME_RUN = /[A-Za-z0-9_.-]*/y;

/**
 * Whether the secret word is a whole word of the name (any word, not only the last: `SECRET_KEY`):
 * followed by a separator, a digit, the end of the name, or (camelCase) a capital after a small
 * letter; a plural "s" is part of the word. So `client_secret`, `accessToken`, `SECRET_KEY`,
 * `credentials` are names that say secret and `tokenizer`, `secretary`, `TOKENIZATION` are not.
 */
function endsWord(text: string, word: string, at: number): boolean {
  let next = text.charCodeAt(at);
  const last = word.charCodeAt(word.length - 1);
  const lower = last >= 97 && last <= 122;
  const upper = last >= 65 && last <= 90;
  if (!lower && !upper) return true; // a CJK word: anything may follow
  if (next === (lower ? 115 : 83)) next = text.charCodeAt(at + 1); // the plural s / S
  if (next >= 97 && next <= 122) return false; // a small letter continues the word either way
  if (next >= 65 && next <= 90) return lower; // a capital: a new camelCase word only after a small letter
  return true;
}

// Last words of a name that say its value is about a secret, not one (`token_endpoint`, `TOKEN_URL`,
// `password_reset_url`, `secret_name`, `token_type`, `password_hint`, `token_expires`).
const NOT_SECRET_LAST_WORDS = new Set(['url', 'uri', 'endpoint', 'name', 'type', 'hint', 'length', 'expiry', 'expires', 'path', 'file']);

/** Whether more words follow the secret word in the name (from `nameRest` on) and the last says "not a secret". */
function namesNoSecret(text: string, nameRest: number): boolean {
  NAME_RUN.lastIndex = nameRest;
  NAME_RUN.exec(text);
  const end = NAME_RUN.lastIndex;
  // The last word, walked back (a regex would retry at every start of a long run): capitals
  // (`URL`), or small letters after at most one capital (`Url`, `url`).
  let start = end;
  while (start > nameRest && isCapital(text.charCodeAt(start - 1))) start--;
  if (start === end) {
    while (start > nameRest && isSmall(text.charCodeAt(start - 1))) start--;
    if (start > nameRest && isCapital(text.charCodeAt(start - 1))) start--;
  }
  return start < end && NOT_SECRET_LAST_WORDS.has(text.slice(start, end).toLowerCase());
}

function isCapital(code: number): boolean {
  return code >= 65 && code <= 90;
}

function isSmall(code: number): boolean {
  return code >= 97 && code <= 122;
}

/**
 * How far before `from` a name is looked for: a stream guard may have released a name (its cut
 * is a window before the end of what arrived, and only the value is the match) and kept it as
 * context, with the value still to come. At most the guard's context (64 characters).
 */
const NAME_LOOKBACK = 48;

function findAssigned(text: string, from: number): Match[] {
  const out: Match[] = [];
  SECRET_WORD.lastIndex = Math.max(0, from - NAME_LOOKBACK);
  for (let w = SECRET_WORD.exec(text); w !== null; w = SECRET_WORD.exec(text)) {
    const nameRest = w.index + w[0].length;
    const v = endsWord(text, w[0], nameRest) && !namesNoSecret(text, nameRest) ? ((ASSIGNED_VALUE.lastIndex = nameRest), ASSIGNED_VALUE.exec(text)) : null;
    // Groups 1..QUOTE_PAIRS.length: a quoted value; the rest: an unquoted one (after each opening quote, or none).
    const quoted = v === null ? undefined : v.slice(1, 1 + QUOTE_PAIRS.length).find((g) => g !== undefined);
    const value = v === null ? undefined : (quoted ?? v.slice(1 + QUOTE_PAIRS.length).find((g) => g !== undefined));
    if (v === null || value === undefined || /^\d+$/.test(value)) {
      NAME_RUN.lastIndex = nameRest;
      NAME_RUN.exec(text);
      SECRET_WORD.lastIndex = Math.max(nameRest, NAME_RUN.lastIndex);
      continue;
    }
    // A quoted value ends one character (its closing quote) before the match's end.
    const end = ASSIGNED_VALUE.lastIndex - (quoted === undefined ? 0 : 1);
    // A value that ended before `from` is context, found already.
    if (end > from) out.push({ start: Math.max(from, end - value.length), end, holdFrom: w.index });
    SECRET_WORD.lastIndex = end;
  }
  return out;
}

// An assignment whose quoted value is still open at the end of the text (a stream cut between its
// quotes): its value may be a passphrase with spaces, so it is held until the quote closes.
const OPEN_QUOTED_TAIL = new RegExp(
  `(?:${SECRET_WORD.source})${NAME_TAIL}[${CLOSE_QUOTES}]?${BLANKS}[:=：]${BLANKS}(?:` +
    QUOTE_PAIRS.map(([open, close]) => `${open}([^${close}\\n]{0,${QUOTED_MAX}})`).join('|') +
    ')$',
  'iu',
);

function openQuotedFrom(text: string, from: number): number {
  const tailStart = Math.max(from, text.length - (secretWindow + QUOTED_MAX));
  const m = OPEN_QUOTED_TAIL.exec(text.slice(tailStart));
  const value = m?.slice(1).find((g) => g !== undefined);
  return m === null || value === undefined ? -1 : tailStart + m.index + m[0].length - value.length;
}

const TOKEN_CHAR = /[A-Za-z0-9_-]/;
const TOKEN_RUN = /[A-Za-z0-9_-]*/y;

function findShaped(text: string, from: number): Match[] {
  const out: Match[] = [];
  SHAPED.lastIndex = from;
  for (let m = SHAPED.exec(text); m !== null; m = SHAPED.exec(text)) {
    if (m.index > 0 && TOKEN_CHAR.test(text[m.index - 1]!)) {
      // Glued to a token run: so is every later start inside that run.
      TOKEN_RUN.lastIndex = m.index;
      TOKEN_RUN.exec(text);
      SHAPED.lastIndex = Math.max(m.index + 1, TOKEN_RUN.lastIndex);
      continue;
    }
    out.push({ start: m.index, end: m.index + m[0].length });
  }
  return out;
}

export function findSecrets(text: string, from = 0): Match[] {
  const pem = text.includes('-----BEGIN', from) ? regexMatches(PEM, text, from) : [];
  return mergeMatches([findShaped(text, from), pem, findAssigned(text, from)]);
}

const JWT_TAIL = /^eyJ[A-Za-z0-9_-]*\.?$/;

/**
 * The start of an unfinished JWT at the end of `text` (header, or header and payload, still
 * growing), else -1. Its parts have no length bound, so a window alone cannot hold them back.
 */
function jwtPartialFrom(text: string, from: number): number {
  const last = text.lastIndexOf('eyJ');
  if (last < from || !JWT_TAIL.test(text.slice(last))) return -1;
  let start = last;
  if (last > 0 && text[last - 1] === '.') {
    // The payload: its header runs back from the dot.
    let i = last - 1;
    while (i > from && TOKEN_CHAR.test(text[i - 1]!)) i--;
    if (text.startsWith('eyJ', i)) start = i;
  }
  return start > 0 && TOKEN_CHAR.test(text[start - 1]!) ? -1 : start;
}

/** The earliest of an unfinished JWT and an open quoted value at the end of `text`, else -1. */
function secretPartialFrom(text: string, from: number): number {
  const jwt = jwtPartialFrom(text, from);
  const quoted = openQuotedFrom(text, from);
  if (jwt < 0) return quoted;
  return quoted < 0 ? jwt : Math.min(jwt, quoted);
}

// A name such as "client_secret" with its separator and quotes fits in this; shaped keys are
// recognised within their first ~40 characters and then grow as "open" matches.
const secretWindow = 128;
export const secretDetector: Detector = { name: 'secret', placeholder: '[SECRET]', window: secretWindow, find: findSecrets, partialFrom: secretPartialFrom };
