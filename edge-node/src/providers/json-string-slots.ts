/**
 * The strings inside parsed JSON (an MCP message's params, a tool call's input, an OpenAI tool
 * call's `arguments` text) as TextSlots guardrails read and rewrite: every string value and every
 * object key, at any depth, and every number of 6 digits or more (as its digits). Keys come after all values, because masking a key renames it and the
 * value slots address their holder by key. Past MAX_TEXT_SLOTS strings or MAX_DEPTH levels the
 * list is marked partial (partial-texts.ts), and guardrails with rules refuse it (fail closed). The
 * model APIs walk only when a direction has rules (deferred-json-texts.ts).
 */
import { randomBytes } from 'node:crypto';
import type { TextSlot } from '../pipeline/context.js';
import { markPartial } from './partial-texts.js';
import type { DirtyMark } from './text-slot.js';

/** Strings (values and keys) one walk looks at, and the nesting it follows. */
export const MAX_TEXT_SLOTS = 50_000;
export const MAX_DEPTH = 64;

type Holder = Record<string, unknown> | unknown[];

/**
 * Collects slots into `slots` (which may already hold others, e.g. message content): call `add` /
 * `addJsonText` for each place, then `finish` once. Writing a slot marks its owner dirty (an event
 * re-serialises only what changed).
 */
export class JsonStringWalk {
  private readonly keys: TextSlot[] = [];
  private count = 0;
  /** String values and keys seen (numbers not counted): compared with the raw text's string literals. */
  private strings = 0;
  private partial = false;

  constructor(
    /** Where the slots go (the caller may add others of its own between walks). */
    readonly slots: TextSlot[] = [],
    private readonly owner?: DirtyMark,
  ) {}

  /** The strings of `holder[key]`: itself when it is a string (or a long number), else every string value and key inside. */
  add(holder: Holder, key: string | number, owner: DirtyMark | undefined = this.owner): void {
    const node = (holder as Record<string | number, unknown>)[key];
    if (typeof node === 'string') this.value(holder, key, owner);
    else if (typeof node === 'number') this.number(holder, key, node, owner);
    else this.visit(node, 1, owner);
  }

  /** `holder[key]` as `add` does, and the key itself as text (a name a mask renames, as keys inside are). */
  addField(holder: Record<string, unknown>, key: string, owner: DirtyMark | undefined = this.owner): void {
    this.field(holder, key, 1, owner);
  }

  /**
   * The strings inside the JSON text at `holder[key]` (a tool call's `arguments`). A write puts the
   * re-serialised JSON in its place, so a text nothing masked stays byte for byte as it came —
   * unless the text holds strings the parsed value lost (a duplicate key: JSON.parse keeps the last
   * value only), which is then re-serialised anyway, so what goes on is what was checked. A JSON
   * string literal is checked decoded (a write re-serialises it); a text that is not JSON (cut
   * short by max_tokens, say) is checked with its JSON string escapes decoded, and a write puts
   * the decoded, rewritten text in its place. Other JSON (a number, true, null) is one text as it is.
   */
  addJsonText(holder: Record<string, unknown>, key: string, owner: DirtyMark | undefined = this.owner): void {
    const text = holder[key];
    if (typeof text !== 'string') return;
    let parsed: unknown;
    let exact = text;
    let valid = true;
    // Read as parseAsWritten reads it: integers past 2^53 (a 19-digit card, an 18-digit ID) as their
    // digits, checked as written rather than rounded, and written back as those numbers once a mask
    // rewrites the text (ReserialisedJson); shorter integers are exact as doubles.
    try {
      ({ value: parsed, exact } = parseMarked(text));
    } catch {
      valid = false;
    }
    if (!valid) {
      const decoded = decodeJsonEscapes(text);
      this.push(decoded === text ? new ValueSlot(holder, key, owner) : new DecodedTextSlot(holder, key, decoded, false, owner));
    } else if (typeof parsed === 'string') {
      // A string literal, or a bare integer past 2^53 (its digits; a mask writes the placeholder as a literal).
      this.push(new DecodedTextSlot(holder, key, parsed, true, owner));
    } else if (typeof parsed === 'object' && parsed !== null) {
      const textOwner = new JsonTextOwner(holder, key, parsed, owner);
      const before = this.strings;
      this.visit(parsed, 1, textOwner);
      if (!this.partial && countJsonStrings(exact) !== this.strings - before) textOwner.dirty = true;
    } else {
      this.push(new ValueSlot(holder, key, owner));
    }
  }

  /** `slots` with the key slots appended, marked partial when the walk stopped at a limit. */
  finish(): TextSlot[] {
    for (const slot of this.keys) this.slots.push(slot);
    if (this.partial) markPartial(this.slots);
    return this.slots;
  }

  private get full(): boolean {
    return this.count >= MAX_TEXT_SLOTS;
  }

  private value(holder: Holder, key: string | number, owner: DirtyMark | undefined, jsonKey?: string): void {
    this.strings += 1;
    // An integer past 2^53 read as its digits is a JSON number: no key makes it a secret (a negative one is not all digits).
    this.push(new ValueSlot(holder, key, owner, jsonKey === undefined || isLongIntegerAt(holder, String(key)) ? undefined : jsonKey));
  }

  /**
   * A number long enough to be a phone, card or ID number (6 digits or more) is checked as its
   * digits; a mask replaces it with the placeholder string. Shorter ones are not slots: a numeric
   * array must not fill the walk's budget.
   */
  private number(holder: Holder, key: string | number, value: number, owner: DirtyMark | undefined): void {
    if (Number.isFinite(value) && Math.abs(value) >= 100_000) this.slots.push(new ValueSlot(holder, key, owner));
  }

  private push(slot: TextSlot): void {
    if (this.full) {
      this.partial = true;
      return;
    }
    this.count += 1;
    this.slots.push(slot);
  }

  /**
   * `jsonKey`: of an array, the key of the object member that holds it (through nested arrays): its
   * string items are that member's values (`{"passwords": ["…", "…"]}`). An object uses its own keys.
   */
  private visit(node: unknown, depth: number, owner: DirtyMark | undefined, jsonKey?: string): void {
    if (typeof node !== 'object' || node === null || this.partial) return;
    if (depth > MAX_DEPTH) {
      this.partial = true;
      return;
    }
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length && !this.partial; i += 1) {
        const item: unknown = node[i];
        if (typeof item === 'string') this.value(node, i, owner, jsonKey);
        else if (typeof item === 'number') this.number(node, i, item, owner);
        else this.visit(item, depth + 1, owner, Array.isArray(item) ? jsonKey : undefined);
      }
      return;
    }
    const holder = node as Record<string, unknown>;
    for (const key of Object.keys(holder)) {
      this.field(holder, key, depth + 1, owner);
      if (this.partial) return;
    }
  }

  /** An object's key as text, then its value (walked at `depth` when it is not a string or number). */
  private field(holder: Record<string, unknown>, key: string, depth: number, owner: DirtyMark | undefined): void {
    if (this.full) {
      this.partial = true;
      return;
    }
    this.count += 1;
    this.strings += 1;
    this.keys.push(new KeySlot(holder, key, owner));
    const value = holder[key];
    // The key goes with its string value, and with the string items of its array value: what names
    // them secrets (TextSlot.jsonKey).
    if (typeof value === 'string') this.value(holder, key, owner, key);
    else if (typeof value === 'number') this.number(holder, key, value, owner);
    else this.visit(value, depth, owner, Array.isArray(value) ? key : undefined);
  }
}

/** The current text at `holder[key]` where addJsonText walked: the re-serialised JSON once a slot was written. */
export function jsonTextOf(holder: Record<string, unknown>, key: string): string {
  const value = holder[key];
  return value instanceof ReserialisedJson ? value.toJSON() : typeof value === 'string' ? value : '';
}

/**
 * Stands for a JSON text some of whose strings were rewritten: serialised (as the string it is)
 * only when its body is, so many masks in one text cost one re-serialisation, not one each.
 */
class ReserialisedJson {
  constructor(private readonly parsed: unknown) {}

  toJSON(): string {
    // Integers past 2^53 no mask replaced go on as the numbers they were, not as strings of their digits.
    return stringifyAsWritten(this.parsed);
  }
}

/** The owner of the slots inside a parsed JSON text: the first write swaps the text for its lazy re-serialisation. */
class JsonTextOwner implements DirtyMark {
  constructor(
    private readonly holder: Record<string, unknown>,
    private readonly key: string,
    private readonly parsed: unknown,
    private readonly parent: DirtyMark | undefined,
  ) {}

  get dirty(): boolean {
    return this.holder[this.key] instanceof ReserialisedJson;
  }

  set dirty(value: boolean) {
    if (!value) return;
    if (!(this.holder[this.key] instanceof ReserialisedJson)) this.holder[this.key] = new ReserialisedJson(this.parsed);
    if (this.parent !== undefined) this.parent.dirty = true;
  }
}

/** A string value in an object or array, or a number read as its digits (a write, a mask, puts a string in its place). */
class ValueSlot implements TextSlot {
  constructor(
    private readonly holder: Holder,
    private readonly key: string | number,
    private readonly owner: DirtyMark | undefined,
    /** The object key of a string value inside walked JSON, or of the member holding its array (TextSlot.jsonKey); not of a field a caller named. */
    readonly jsonKey?: string,
  ) {}

  get text(): string {
    const value = (this.holder as Record<string | number, unknown>)[this.key];
    return typeof value === 'string' ? value : typeof value === 'number' ? String(value) : '';
  }

  set text(next: string) {
    // defineProperty: an own "__proto__" key from JSON.parse stays a plain property.
    Object.defineProperty(this.holder, this.key, { value: next, writable: true, enumerable: true, configurable: true });
    if (this.owner !== undefined) this.owner.dirty = true;
  }
}

/**
 * The next numbered suffix to try per holder and masked name: without it, N keys masked to one
 * name would probe `name (2)`, `name (3)`… from 2 each time (quadratic: 10 000 keys blocked the
 * event loop for seconds). A WeakMap, filled only by renames.
 */
const nextSuffix = new WeakMap<object, Map<string, number>>();

/** An object key: masking renames it (`name`, else the first free `name (n)`, n counting on from the last one given in its holder, from 2). */
class KeySlot implements TextSlot {
  constructor(
    private readonly holder: Record<string, unknown>,
    private key: string,
    private readonly owner: DirtyMark | undefined,
  ) {}

  get text(): string {
    return this.key;
  }

  set text(next: string) {
    if (next === this.key) return;
    let name = next;
    if (Object.hasOwn(this.holder, name)) {
      let suffixes = nextSuffix.get(this.holder);
      if (suffixes === undefined) nextSuffix.set(this.holder, (suffixes = new Map<string, number>()));
      let n = suffixes.get(next) ?? 2;
      while (Object.hasOwn(this.holder, `${next} (${n})`)) n += 1;
      name = `${next} (${n})`;
      suffixes.set(next, n + 1);
    }
    Object.defineProperty(this.holder, name, { value: this.holder[this.key], writable: true, enumerable: true, configurable: true });
    delete this.holder[this.key];
    // An integer past 2^53 under a renamed key is still written as a number (stringifyAsWritten).
    const noted = longIntegers.get(this.holder);
    const digits = noted?.get(this.key);
    if (noted !== undefined && digits !== undefined) {
      noted.delete(this.key);
      noted.set(name, digits);
    }
    this.key = name;
    if (this.owner !== undefined) this.owner.dirty = true;
  }
}

/**
 * A JSON text checked as one decoded string: a JSON string literal (a write puts the rewritten
 * string, serialised, in its place) or text that is not JSON, read with its escapes decoded (a
 * write puts the rewritten decoded text in its place: there was no JSON to keep).
 */
class DecodedTextSlot implements TextSlot {
  constructor(
    private readonly holder: Record<string, unknown>,
    private readonly key: string,
    private value: string,
    private readonly literal: boolean,
    private readonly owner: DirtyMark | undefined,
  ) {}

  get text(): string {
    return this.value;
  }

  set text(next: string) {
    this.value = next;
    this.holder[this.key] = this.literal ? JSON.stringify(next) : next;
    if (this.owner !== undefined) this.owner.dirty = true;
  }
}

/**
 * Whether JSON.parse dropped strings of `text` (duplicate keys: it keeps the last value) in making
 * `parsed`: then the text holds something a check of `parsed` never saw, and what goes on must be
 * `parsed` re-serialised, not `text`.
 */
export function losesStrings(text: string, parsed: unknown): boolean {
  return countJsonStrings(text) !== countParsedStrings(parsed);
}

/** The strings (object keys and string values) in a parsed JSON value, without recursion (an upstream's nesting is not bounded). */
function countParsedStrings(value: unknown): number {
  let count = 0;
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const node = pending.pop();
    if (typeof node === 'string') count += 1;
    else if (Array.isArray(node)) for (const item of node) pending.push(item);
    else if (typeof node === 'object' && node !== null) {
      for (const key of Object.keys(node)) {
        count += 1;
        pending.push((node as Record<string, unknown>)[key]);
      }
    }
  }
  return count;
}

/**
 * The string literals (keys and values) in a valid JSON text, counted in one pass: more than the
 * parsed value holds means JSON.parse dropped some (duplicate keys).
 */
function countJsonStrings(text: string): number {
  let count = 0;
  for (let i = text.indexOf('"'); i !== -1; i = text.indexOf('"', closingQuote(text, i) + 1)) count += 1;
  return count;
}

/** Where the string literal opened at `open` ends (its closing quote, or the text's length): an escape takes the character after it along. */
function closingQuote(text: string, open: number): number {
  let i = open + 1;
  while (i < text.length && text.charCodeAt(i) !== QUOTE) i += text.charCodeAt(i) === BACKSLASH ? 2 : 1;
  return i;
}

/**
 * A JSON text parsed as guardrails must check it when that text itself is relayed (MCP): integers
 * past 2^53 are read as strings of their digits (quoteLongIntegers), since JSON.parse would round
 * them (a 19-digit card checked as another number while its digits went on). Exact ones (up to
 * 2^53 - 1, a 16-digit card among them) stay numbers, checked as their digits (ValueSlot), so a
 * message rewritten by a mask keeps their type. `longIntegers`: some were read as strings
 * (stringifyAsWritten writes each back as the number it was). `losesStrings`: the parse dropped
 * strings of the text (a duplicate key), so the text holds something never checked. Throws as
 * JSON.parse does on text that is not JSON.
 */
export function parseAsWritten(text: string): { value: unknown; longIntegers: boolean; losesStrings: boolean } {
  const { value, exact } = parseMarked(text);
  return { value, longIntegers: exact !== text, losesStrings: losesStrings(exact, value) };
}

/**
 * parseAsWritten's parse, with the text it parsed (`exact`: `text` with each integer past 2^53
 * quoted and marked; `text` itself when there are none), whose string literals are those of the value.
 */
function parseMarked(text: string): { value: unknown; exact: string } {
  // The text is searched for long integers only when it may hold one (the usual case: one regex test).
  const exact = quoteLongIntegers(text);
  if (exact === text) return { value: JSON.parse(text) as unknown, exact };
  const value: unknown = JSON.parse(exact, noteLongInteger);
  if (typeof value === 'object' && value !== null) holdsLongIntegers.add(value);
  return { value, exact };
}

/**
 * Put before the digits of an integer parseAsWritten quoted, so the parse can tell it from a string
 * the text wrote (and note where it sits). It starts with U+0000 and holds a random nonce drawn
 * when the process starts: no caller can write a string that starts with it, so it is used on every
 * text, those holding the escape `\u0000` included.
 */
const MARK_NONCE = randomBytes(12).toString('hex');
const LONG_INTEGER_MARK = `\u0000${MARK_NONCE}:`;
/** The mark as JSON text writes it (JSON.stringify escapes U+0000 so). */
const MARK_IN_JSON = `\\u0000${MARK_NONCE}:`;
const MARKED_INTEGER = new RegExp(`"${MARK_IN_JSON.replaceAll('\\', '\\\\')}(-?\\d+)"`, 'g');

/**
 * Where parseAsWritten read an integer past 2^53 as its digits: per holder (object or array), each
 * key and the digits read there. stringifyAsWritten writes a value that still holds those digits
 * as the number it was; a mask that rewrote it (its placeholder) makes it a string as any other.
 */
const longIntegers = new WeakMap<object, Map<string, string>>();
/** Whether `holder[key]` holds the digits of an integer past 2^53 that parseAsWritten read (not a string the text wrote). */
export function isLongIntegerAt(holder: object, key: string): boolean {
  const value = (holder as Record<string, unknown>)[key];
  return typeof value === 'string' && longIntegers.get(holder)?.get(key) === value;
}

/** Parsed values (their outermost object or array) holding a noted integer: the others need no replacer. */
const holdsLongIntegers = new WeakSet<object>();

/** JSON.parse reviver: a marked string is an integer quoteLongIntegers quoted; its digits are noted where they sit. */
function noteLongInteger(this: object, key: string, value: unknown): unknown {
  if (typeof value !== 'string' || !value.startsWith(LONG_INTEGER_MARK)) return value;
  const digits = value.slice(LONG_INTEGER_MARK.length);
  let noted = longIntegers.get(this);
  if (noted === undefined) longIntegers.set(this, (noted = new Map<string, string>()));
  noted.set(key, digits);
  return digits;
}

/**
 * JSON.stringify of a value parseAsWritten gave (masked or redacted since), with each integer past
 * 2^53 still in place written as the number it was, digit for digit: a 64-bit JSON-RPC `id` or
 * argument goes out as it came, not as a string of its digits nor rounded.
 */
export function stringifyAsWritten(value: unknown, within: unknown = value): string {
  // `within`: the value parseAsWritten gave, when `value` is a part of it (a tool block's input in an event).
  if (typeof value !== 'object' || value === null || typeof within !== 'object' || within === null || !holdsLongIntegers.has(within)) return JSON.stringify(value);
  // The marked digits are written as strings (JSON.stringify writes no bare number text), then unquoted.
  return JSON.stringify(value, function markLongInteger(this: object, key: string, item: unknown): unknown {
    return typeof item === 'string' && longIntegers.get(this)?.get(key) === item ? LONG_INTEGER_MARK + item : item;
  }).replace(MARKED_INTEGER, '$1');
}

/** Integers of 16 digits or more: past 2^53 a double rounds them. */
export const LONG_INTEGER_HINT = /\d{16}/;

/**
 * `json`, the node's serialisation of a body it parsed from `received` (the caller's text), with
 * each integer past 2^53 that `received` wrote put back digit for digit: JSON.parse rounded it (an
 * int64 `seed`, an id in `metadata`), and the fields the node does not read go to the upstream as
 * sent. Found by the number JSON.stringify writes for the rounded double; one that two different
 * integers of `received` round to is left as it is (which was where cannot be told).
 */
export function withLongIntegersOf(received: string | undefined, json: string): string {
  if (received === undefined || !LONG_INTEGER_HINT.test(received)) return json;
  const digitsOf = new Map<string, string | null>();
  rewriteNumberTokens(received, (token) => {
    if (!isLongIntegerToken(token)) return undefined;
    const rounded = JSON.stringify(Number(token));
    const seen = digitsOf.get(rounded);
    digitsOf.set(rounded, seen === undefined || seen === token ? token : null);
    return undefined;
  });
  if (digitsOf.size === 0) return json;
  return rewriteNumberTokens(json, (token) => digitsOf.get(token) ?? undefined);
}

/**
 * The integers past 2^53 that `received` (a caller's JSON text) writes outside strings, as written:
 * what withLongIntegersOf sends on digit for digit, while the parsed body holds them rounded.
 */
export function longIntegerTokens(received: string | undefined): string[] {
  if (received === undefined || !LONG_INTEGER_HINT.test(received)) return [];
  const tokens: string[] = [];
  rewriteNumberTokens(received, (token) => {
    if (isLongIntegerToken(token)) tokens.push(token);
    return undefined;
  });
  return tokens;
}

/** `text` (JSON) with each number token outside strings that `rewrite` answers replaced by its answer. */
function rewriteNumberTokens(text: string, rewrite: (token: string) => string | undefined): string {
  let out = '';
  let copied = 0;
  let i = 0;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      i = closingQuote(text, i) + 1;
    } else if (isDigit(c) || c === MINUS) {
      const start = i;
      i += 1;
      while (i < text.length && /[0-9.eE+-]/.test(text[i]!)) i += 1;
      const replacement = rewrite(text.slice(start, i));
      if (replacement !== undefined) {
        out += text.slice(copied, start) + replacement;
        copied = i;
      }
    } else {
      i += 1;
    }
  }
  return copied === 0 ? text : out + text.slice(copied);
}

/**
 * `text` (JSON) with every integer past 2^53 - 1 outside strings (the ones JSON.parse would round)
 * put in quotes after LONG_INTEGER_MARK, so JSON.parse keeps its digits and noteLongInteger knows
 * them; `text` itself when it has none (the usual case: one regex test).
 */
function quoteLongIntegers(text: string): string {
  if (!LONG_INTEGER_HINT.test(text)) return text;
  return rewriteNumberTokens(text, (token) => (isLongIntegerToken(token) ? `"${MARK_IN_JSON}${token}"` : undefined));
}

const INTEGER_TOKEN = /^-?\d+$/;
const MAX_SAFE_DIGITS = String(Number.MAX_SAFE_INTEGER);

/** Whether a number token is an integer past 2^53 - 1 (a fraction or exponent makes it a double as JSON means it). */
function isLongIntegerToken(token: string): boolean {
  if (!INTEGER_TOKEN.test(token)) return false;
  const digits = token.charCodeAt(0) === MINUS ? token.slice(1) : token;
  return digits.length > MAX_SAFE_DIGITS.length || (digits.length === MAX_SAFE_DIGITS.length && digits > MAX_SAFE_DIGITS);
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

const MINUS = 0x2d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const SIMPLE_ESCAPES: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
const HEX4 = /^[0-9a-fA-F]{4}$/;

/**
 * `text` with JSON string escapes decoded wherever they are, tolerantly: an escape that is cut
 * short or unknown stays as it is. For text that is not JSON (truncated), so `\u0041`-style
 * escapes cannot hide a match from the rules.
 */
function decodeJsonEscapes(text: string): string {
  let i = text.indexOf('\\');
  if (i === -1) return text;
  let out = '';
  let copied = 0;
  while (i !== -1 && i + 1 < text.length) {
    const c = text[i + 1]!;
    let decoded = SIMPLE_ESCAPES[c];
    let length = 2;
    if (c === 'u') {
      const hex = text.slice(i + 2, i + 6);
      if (HEX4.test(hex)) {
        decoded = String.fromCharCode(Number.parseInt(hex, 16));
        length = 6;
      }
    }
    if (decoded === undefined) {
      i = text.indexOf('\\', i + 1);
      continue;
    }
    out += text.slice(copied, i) + decoded;
    copied = i + length;
    i = text.indexOf('\\', copied);
  }
  return out + text.slice(copied);
}
