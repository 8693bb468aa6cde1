// Credential shapes: provider API keys (OpenAI, Anthropic, AWS, GitHub, Slack, Google), PEM private
// key blocks and OpenPGP private key armour, JWTs, `Bearer` tokens, and generic assignments such as
// `api_key = "…"` / `password: …` / `密码：…`.
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

// A PEM private key block, or OpenPGP private key armour (`-----BEGIN PGP PRIVATE KEY BLOCK-----`);
// an unterminated one is masked to the end of the text (fail safe).
const PEM = /-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|$)/g;

// `name = value` where the name says secret; the value (8+ characters, not all digits) is the match.
// The scan looks for the telling word first (cheap), then for the rest of the name, the separator
// and the value right after it. A quoted value runs to its closing quote (a passphrase has spaces),
// up to QUOTED_MAX characters; inside straight quotes a backslash escapes the next character, as in
// JSON and code (`"my \"pass\" phrase"` is one value: ending at the escaped quote left the rest of
// it in clear); a value in escaped quotes (`\"password\": \"…\"`, JSON shown inside a string) is
// read too. While its quote is open at the end of a stream's text, the guard holds the assignment
// from its name (secretPartial). An unquoted one
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
/** What a quoted value is made of: inside straight quotes a backslash escapes the next character. */
function quotedChar(open: string, close: string): string {
  return open === close ? String.raw`(?:[^${close}\\\n]|\\[^\n])` : `[^${close}\\n]`;
}
// The quoted forms of a value, each an opening and closing quote and what lies between (the open
// quote is a pattern): the QUOTE_PAIRS, then escaped straight quotes (`\"…\"`).
const QUOTED_FORMS = [
  ...QUOTE_PAIRS.map(([open, close]) => ({ open, close, closeLength: 1, char: quotedChar(open, close) })),
  { open: String.raw`\\"`, close: String.raw`\\"`, closeLength: 2, char: String.raw`[^"\\\n]` },
];
// The rest of a name and the blanks around its separator (unbounded: a whole text finds any). A
// stream guard holds a name with its value (Match.holdFrom) once the value is found, so a name and
// the value's first 8 characters within the stream window (secretWindow) are never released apart;
// a longer gap between them may be (known limit, guardrails/README.md).
const NAME_TAIL = '[A-Za-z0-9_.-]*';
const BLANKS = '\\s*';
// A name's closing quote, escaped or not (`"password":`, `\"password\":`).
const NAME_END = String.raw`(?:\\?[${CLOSE_QUOTES}])?`;
const ASSIGNED_VALUE = new RegExp(
  `${NAME_TAIL}${NAME_END}${BLANKS}[:=：]${BLANKS}(?:` +
    QUOTED_FORMS.map(({ open, close, char }) => `${open}(${char}{8,${QUOTED_MAX}})${close}`).join('|') +
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
 * Whether an object key names a secret as an assignment's name does (findAssigned): a secret word
 * that ends a word of it, the rest of the key a name's tail (`db_password`, `x-api-key`, `密码`;
 * not `password hint`), its last word not one that says the value is about a secret
 * (`password_url`, `token_type`).
 */
export function namesSecret(name: string): boolean {
  // Where the key's last run of name characters starts: a secret word must end at or after it.
  let tail = name.length;
  while (tail > 0 && isNameChar(name.charCodeAt(tail - 1))) tail--;
  SECRET_WORD.lastIndex = 0;
  for (let w = SECRET_WORD.exec(name); w !== null; w = SECRET_WORD.exec(name)) {
    const nameRest = w.index + w[0].length;
    // Every later word of the run ends the same run, so the first whole word decides.
    if (nameRest >= tail && endsWord(name, w[0], nameRest)) return !namesNoSecret(name, nameRest);
  }
  return false;
}

/** A character of NAME_TAIL. */
function isNameChar(code: number): boolean {
  return isCapital(code) || isSmall(code) || (code >= 48 && code <= 57) || code === 95 || code === 46 || code === 45;
}

/**
 * A string value of a JSON object read as structured data, under the key `name` (or an item of an
 * array there): the whole value is a secret when the key names one and the value is what an
 * assignment's value must be (8 or more characters, not all digits). Its bounds are the JSON
 * string's; as a quoted value's, a value with spaces is one only up to QUOTED_MAX characters
 * (a passphrase): a longer one on one line is prose (`{"secret": "The secret to good bread is…"}`),
 * left to findSecrets, which still finds a shaped key inside it. One with line breaks is masked
 * whole at any length: a `.env` block or a key file (`DB_PASS=…` lines the text rules do not name). A token with no white space is one at any
 * length (a long base64 key). JSON numbers are never walked with their key (json-string-slots.ts).
 */
function findSecretValue(name: string, text: string): Match[] {
  if (text.length < 8 || /^\d+$/.test(text) || (text.length > QUOTED_MAX && /\s/.test(text) && !/[\r\n]/.test(text))) return [];
  return namesSecret(name) ? [{ start: 0, end: text.length }] : [];
}

/**
 * How far before `from` a name is looked for: a stream guard may have released a name (its cut
 * is a window before the end of what arrived, and only the value is the match) and kept it as
 * context, with the value still to come. At most the guard's context (64 characters).
 */
const NAME_LOOKBACK = 48;

/**
 * Assignments from `from` on. The scan goes on after each value it takes, so a stream's scan starts
 * no earlier than `matchedTo`: a secret word inside a value already taken (`password="x token: "`)
 * names nothing, else the stream read `token: "…` on from there where the whole text did not.
 */
function findAssigned(text: string, from: number, matchedTo: number): Match[] {
  const out: Match[] = [];
  SECRET_WORD.lastIndex = Math.max(0, matchedTo, from - NAME_LOOKBACK);
  for (let w = SECRET_WORD.exec(text); w !== null; w = SECRET_WORD.exec(text)) {
    const nameRest = w.index + w[0].length;
    // Not a whole word (`tokenizer`): a later word of the same name may still be one
    // (`tokenizer_password`), so the scan goes on right after this one. A stream's scan may start
    // inside the name, past this word, and must decide as the whole text's.
    if (!endsWord(text, w[0], nameRest)) continue;
    const v = namesNoSecret(text, nameRest) ? null : ((ASSIGNED_VALUE.lastIndex = nameRest), ASSIGNED_VALUE.exec(text));
    // Groups 1..QUOTED_FORMS.length: a quoted value; the rest: an unquoted one (after each opening quote, or none).
    const quotedForm = v === null ? -1 : v.slice(1, 1 + QUOTED_FORMS.length).findIndex((g) => g !== undefined);
    const value = v === null ? undefined : quotedForm >= 0 ? v[1 + quotedForm] : v.slice(1 + QUOTED_FORMS.length).find((g) => g !== undefined);
    if (v === null || value === undefined || /^\d+$/.test(value)) {
      // Decided by what follows the name's run (its last word, its value), so every secret word
      // later in the run fails the same way: skip it.
      NAME_RUN.lastIndex = nameRest;
      NAME_RUN.exec(text);
      SECRET_WORD.lastIndex = Math.max(nameRest, NAME_RUN.lastIndex);
      continue;
    }
    // A quoted value ends at its closing quote, before the match's end.
    const end = ASSIGNED_VALUE.lastIndex - (quotedForm >= 0 ? QUOTED_FORMS[quotedForm]!.closeLength : 0);
    // A value that ended before `from` is context, found already.
    if (end > from) out.push({ start: Math.max(from, end - value.length), end, holdFrom: w.index });
    SECRET_WORD.lastIndex = end;
  }
  return out;
}

// An assignment whose value is not decided at the end of the text (a stream cut inside it): its
// quote still open (a passphrase with spaces is held until the quote closes; an escape may be cut
// after its backslash), or no quote and fewer than 8 characters so far. It is held from its name:
// held from its value only, its name went out once the value grew past the window (a long value
// after blanks), and the next scan, seeing the value without its name, let it out in clear.
// The value (its opening quote included) is the capture group.
const OPEN_ASSIGNMENT_TAIL = new RegExp(
  `(?:${SECRET_WORD.source})${NAME_TAIL}${NAME_END}${BLANKS}[:=：]${BLANKS}(` +
    QUOTED_FORMS.map(({ open, char }) => `${open}${char}{0,${QUOTED_MAX}}\\\\?`).join('|') +
    `|[^${VALUE_ENDS}]{0,7})$`,
  'iu',
);

function openAssignment(text: string, from: number): Match | null {
  // As far back as the tail may start: a name, blanks, and a quoted value of QUOTED_MAX escapes.
  const tailStart = Math.max(from, text.length - (secretWindow + 2 * QUOTED_MAX));
  const m = OPEN_ASSIGNMENT_TAIL.exec(text.slice(tailStart));
  if (m === null) return null;
  const holdFrom = tailStart + m.index;
  return { start: holdFrom + m[0].length - m[1]!.length, end: text.length, holdFrom };
}

// `Bearer <token>` (RFC 6750 `b64token`); the token is the match. After an `Authorization` header
// name (`Authorization: Bearer …`, `"authorization": "Bearer …"`) any token of 8 or more
// characters is one but a word in small letters or a placeholder in capitals (`YOURTOKEN`,
// `ACCESS-TOKEN`, `YOUR_TOKEN`). Alone, "bearer" is a word of prose ("the bearer of this cheque",
// "pay to bearer 2024-01-15/INV-…", "install to bearer /usr/local/…"), so the token must look like
// a credential: 16 or more characters, a letter and a digit among its first 32 (decided within the
// stream window), no `/`, not starting like a date or a path. Placeholders in code
// (`Bearer ${token}`, `Bearer <token>`, `$TOKEN`, `"Bearer " + token`) carry no token characters.
const BEARER = /(?<![A-Za-z0-9_-])bearer[ \t]{1,8}([A-Za-z0-9._~+/-]+=*)/gi;
const AUTHORIZATION_BEFORE = /authorization["']?[ \t]*[:=][ \t]*["']?[ \t]*$/i;
// `Proxy-Authorization: "` and blanks: as far as an Authorization name is looked for before "bearer".
const AUTHORIZATION_LOOKBACK = 40;
const CAPITALS_PLACEHOLDER = /^[A-Z_-]+$/;
const DATE_OR_PATH_START = /^(?:\d{1,4}[-.]\d{1,2}[-.]|[.~])/;

/** Whether the token after "Bearer" is a credential, after an Authorization name (`header`) or alone. */
function isBearerToken(core: string, header: boolean): boolean {
  if (header) return core.length >= 8 && !/^[a-z]+$/.test(core) && !CAPITALS_PLACEHOLDER.test(core);
  const head = core.slice(0, 32);
  return core.length >= 16 && /\d/.test(head) && /[A-Za-z]/.test(head) && !core.includes('/') && !DATE_OR_PATH_START.test(core);
}

function findBearer(text: string, from: number, matchedTo: number): Match[] {
  const out: Match[] = [];
  // Where the last token taken ends: a match is held from no earlier. A header name inside it
  // (`Authorization: Bearer Authorization: Bearer …`) is released with it and seen again as
  // context; holding from there made every match of a chain hold the one before, and the stream
  // rescanned the whole chain up to the hold cap on every delta.
  let takenTo = matchedTo;
  BEARER.lastIndex = Math.max(0, from - NAME_LOOKBACK);
  for (let m = BEARER.exec(text); m !== null; m = BEARER.exec(text)) {
    const tokenStart = m.index + m[0].length - m[1]!.length;
    const before = text.slice(Math.max(0, m.index - AUTHORIZATION_LOOKBACK), m.index);
    const header = AUTHORIZATION_BEFORE.exec(before);
    if (!isBearerToken(m[1]!.replace(/=+$/, ''), header !== null)) {
      // The token may itself be "Bearer" (`Bearer Bearer abc…`): go on from its start.
      BEARER.lastIndex = tokenStart;
      continue;
    }
    const end = m.index + m[0].length;
    const holdFrom = Math.max(takenTo, header === null ? m.index : m.index - before.length + header.index);
    if (end > from) out.push({ start: Math.max(from, tokenStart), end, holdFrom });
    takenTo = end;
  }
  return out;
}

/** What a Bearer token is made of (BEARER's token, but its `=` padding). */
function isBearerTokenChar(code: number): boolean {
  return (
    (code >= 48 && code <= 57) || (code >= 65 && code <= 90) || (code >= 97 && code <= 122) || code === 45 || code === 46 || code === 95 || code === 126 || code === 43 || code === 47
  );
}

/**
 * A Bearer token that reaches the end of `text` and is not a match yet but may become one as it
 * grows (findBearer decides on the whole token: shorter than 8 or 16 characters, a word in small
 * letters or capitals so far, no digit yet among its first 32), else null. The token is where a
 * mask begins; it is held from the Authorization name before it, else from its "bearer". Padding (`=`) ends a token: one that is no match
 * then never becomes one.
 */
function openBearer(text: string): Match | null {
  const end = text.length;
  let start = end;
  while (start > 0 && isBearerTokenChar(text.charCodeAt(start - 1))) start--;
  if (start === end) return null;
  let blanks = start;
  while (blanks > 0 && start - blanks < 8 && (text[blanks - 1] === ' ' || text[blanks - 1] === '\t')) blanks--;
  if (blanks === start) return null;
  const word = blanks - 'bearer'.length;
  if (word < 0 || text.slice(word, blanks).toLowerCase() !== 'bearer' || (word > 0 && TOKEN_CHAR.test(text[word - 1]!))) return null;
  const core = text.slice(start);
  const before = text.slice(Math.max(0, word - AUTHORIZATION_LOOKBACK), word);
  const header = AUTHORIZATION_BEFORE.exec(before);
  if (isBearerToken(core, header !== null)) return null;
  // Alone, a token decided not to be one stays so: a `/`, a date or path start, 32 characters without a letter and a digit.
  if (header === null && (core.includes('/') || DATE_OR_PATH_START.test(core) || core.length >= 32)) return null;
  // Held from the Authorization name, as findBearer holds a match: the hold cap keeps what is held
  // from as the head of a value it cuts through, and a head starting at "bearer" judged the rest
  // by the stricter rule for a token alone, which let it out in clear.
  return { start, end, holdFrom: header === null ? word : word - before.length + header.index };
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

export function findSecrets(text: string, from = 0, matchedTo = 0): Match[] {
  const pem = text.includes('-----BEGIN', from) ? regexMatches(PEM, text, from) : [];
  return mergeMatches([findShaped(text, from), pem, findBearer(text, from, matchedTo), findAssigned(text, from, matchedTo)]);
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

/** The earliest held of an unfinished JWT, an undecided assignment and an undecided Bearer token at the end of `text`, else null. */
function secretPartial(text: string, from: number): Match | null {
  const jwt = jwtPartialFrom(text, from);
  let earliest: Match | null = jwt < 0 ? null : { start: jwt, end: text.length };
  for (const open of [openAssignment(text, from), openBearer(text)]) {
    if (open !== null && (earliest === null || (open.holdFrom ?? open.start) < (earliest.holdFrom ?? earliest.start))) earliest = open;
  }
  return earliest;
}

// A name such as "client_secret" with its separator and quotes fits in this; shaped keys are
// recognised within their first ~40 characters and then grow as "open" matches.
const secretWindow = 128;
export const secretDetector: Detector = { name: 'secret', placeholder: '[SECRET]', window: secretWindow, find: findSecrets, partial: secretPartial, findValueOf: findSecretValue };
