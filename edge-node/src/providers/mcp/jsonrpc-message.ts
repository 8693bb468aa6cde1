/**
 * The JSON-RPC 2.0 messages an MCP client POSTs (streamable HTTP): one request, notification or
 * response object, or a batch array of them. Only the envelope is checked (a key that reads as one
 * of its fields ignoring case is refused: misspeltEnvelopeField); `params`, `result` and `error`
 * belong to the tool server. Also: the label a call is recorded under, and the text of
 * messages (both ways) as slots guardrails can read and rewrite.
 */
import { z } from 'zod';
import type { TextSlot } from '../../pipeline/context.js';
import { isLongIntegerAt, JsonStringWalk, parseAsWritten } from '../json-string-slots.js';
import { isRecord } from '../text-slot.js';
import type { DirtyMark } from '../text-slot.js';

/** More than this many messages in one POST is refused (MCP clients send one at a time). */
export const MAX_BATCH_MESSAGES = 100;

const jsonRpcId = z.union([z.string().max(256), z.int(), z.null()]);
const params = z.union([z.record(z.string(), z.unknown()), z.array(z.unknown())]);

// Loose objects: MCP adds `_meta` and future fields; the tool server judges them.
const requestOrNotification = z.looseObject({
  jsonrpc: z.literal('2.0'),
  method: z.string().min(1).max(256),
  id: jsonRpcId.optional(),
  params: params.optional(),
});
const response = z.looseObject({
  jsonrpc: z.literal('2.0'),
  id: jsonRpcId,
  result: z.unknown().optional(),
  error: z.looseObject({ code: z.int(), message: z.string() }).optional(),
}).refine((m) => ('result' in m) !== ('error' in m), { message: 'a response has exactly one of result and error' });

export const jsonRpcMessageSchema = z.union([requestOrNotification, response], {
  error: () => 'must be a JSON-RPC 2.0 request, notification or response',
});
export const jsonRpcPostSchema = z.union([
  jsonRpcMessageSchema,
  z.array(jsonRpcMessageSchema).min(1).max(MAX_BATCH_MESSAGES),
], { error: () => `must be a JSON-RPC 2.0 message or a batch of 1 to ${MAX_BATCH_MESSAGES}` });

export type JsonRpcMessage = z.infer<typeof jsonRpcMessageSchema>;
export type JsonRpcPost = z.infer<typeof jsonRpcPostSchema>;

/** The fields JSON-RPC names in a message: the node reads `method` (billing, the batch rule, the record's label) and `id` (answers matched to requests). */
const JSON_RPC_FIELDS: ReadonlySet<string> = new Set(['jsonrpc', 'id', 'method', 'params', 'result', 'error']);
/**
 * Letters outside ASCII that a case-insensitive decoder takes for ASCII ones: Go's encoding/json
 * folds `ſ` (U+017F) to s and the Kelvin sign `K` (U+212A) to k; .NET's OrdinalIgnoreCase upper-cases
 * `ı` (U+0131) to I; Java's Turkish lower case makes `İ` (U+0130) i.
 */
const FOLDED_TO_ASCII: Readonly<Record<string, string>> = { '\u017f': 's', '\u212a': 'k', '\u0131': 'i', '\u0130': 'i' };

/** The JSON-RPC field `key` reads as under case folding, when it is not that field spelt exactly. */
function misspeltField(key: string): string | undefined {
  // Every field is 2 to 7 letters, and each letter that folds to one of them is one UTF-16 unit.
  if (key.length < 2 || key.length > 7 || JSON_RPC_FIELDS.has(key)) return undefined;
  let folded = '';
  for (const char of key) folded += FOLDED_TO_ASCII[char] ?? char.toLowerCase();
  return JSON_RPC_FIELDS.has(folded) ? folded : undefined;
}

/**
 * A top-level key of a POSTed message (or of a batch's messages) that differs from a JSON-RPC field
 * (`jsonrpc`, `id`, `method`, `params`, `result`, `error`) only in letter case, with the field it
 * reads as and the message's place in a batch. A tool server whose decoder matches keys ignoring
 * case (Go's encoding/json, last key wins) would run `{"method":"ping","Method":"tools/call"}` as
 * the tools/call the node billed as a ping: such a message is refused, not guessed at. The node
 * reads nothing inside `params` by name (input rules check every key and value there), so only the
 * envelope is checked.
 */
export function misspeltEnvelopeField(post: unknown): { key: string; field: string; index?: number } | undefined {
  const batch = Array.isArray(post);
  const messages = batch ? (post as unknown[]) : [post];
  for (let i = 0; i < messages.length; i += 1) {
    const message = messages[i];
    if (!isRecord(message)) continue;
    for (const key of Object.keys(message)) {
      const field = misspeltField(key);
      if (field !== undefined) return batch ? { key, field, index: i } : { key, field };
    }
  }
  return undefined;
}

/** The JSON-RPC method of one message; 'response' for a client's answer to the server. */
function methodOf(message: JsonRpcMessage): string {
  return 'method' in message && typeof message.method === 'string' ? message.method : 'response';
}

/** What the call is recorded as (ctx.served.model): the method, `batch` for several. */
export function callLabel(post: JsonRpcPost): string {
  if (!Array.isArray(post)) return methodOf(post);
  return post.length === 1 && post[0] !== undefined ? methodOf(post[0]) : 'batch';
}

/**
 * The JSON-RPC methods a tool server's `callMicros` is charged for, once per message (docs/billing.md,
 * "Tool calls"): calling a tool. The session's plumbing — initialize, notifications, tools/list,
 * resources, prompts, ping, responses — and GET/DELETE cost nothing.
 */
export const BILLABLE_METHODS: ReadonlySet<string> = new Set(['tools/call']);

/**
 * How many billable calls (BILLABLE_METHODS) a POSTed JSON-RPC message or batch holds. A
 * `tools/call` sent without an id (a notification) counts too: the server may still run it.
 * Reads only the envelope's `method`: cheap on any batch.
 */
export function billableCallCount(post: unknown): number {
  let count = 0;
  for (const message of Array.isArray(post) ? (post as unknown[]) : [post]) {
    if (isRecord(message) && typeof message.method === 'string' && BILLABLE_METHODS.has(message.method)) count += 1;
  }
  return count;
}

/**
 * The text of JSON-RPC messages that guardrails check, as slots: every string value and every
 * object key under `params` (requests and notifications), `result` and `error` (responses), at any
 * depth, and every other top-level field of a message with its name (json-string-slots.ts, with
 * its limits: past them the list is marked partial). The envelope (`jsonrpc`, `id`, `method`) of a
 * well-formed message is not text. Anything else in `post` — an object that is not a JSON-RPC
 * message (a `{"detail": …}` error body), a string, a number, an array of them — is not a message
 * whose parts are known: every string value and key in it is text. Writing a slot marks `owner`
 * dirty (an event stream re-serialises only what changed). A string (or number) that is the whole
 * of `post` cannot be rewritten in place: use jsonTexts for a body that may be one.
 */
export function messageTexts(post: unknown, owner?: DirtyMark): TextSlot[] {
  const walk = new JsonStringWalk([], owner);
  if (Array.isArray(post)) {
    for (let i = 0; i < post.length; i += 1) addMessage(walk, post, i);
  } else if (isRecord(post)) {
    addMessage(walk, [post], 0);
  }
  return walk.finish();
}

/**
 * The text of any JSON a tool server sent (a JSON answer's body, an event's data), held at
 * `box[0]` so that a bare string or number there can be masked too (the box then holds the
 * rewritten value): messageTexts for a message or batch, every string otherwise.
 */
export function jsonTexts(box: [unknown], owner?: DirtyMark): TextSlot[] {
  const value = box[0];
  if (Array.isArray(value) || isRecord(value)) return messageTexts(value, owner);
  const walk = new JsonStringWalk([], owner);
  walk.add(box, 0);
  return walk.finish();
}

/**
 * JSON text of MCP (a POSTed message or batch, a JSON answer, an event's data) parsed for a relay
 * of the text as written: guardrails check the parsed value, so integers of 16 digits or more in it
 * are their digits (parseAsWritten), not the doubles JSON.parse rounds them to; each message's `id`
 * and `error.code` stay numbers where exact (the envelope, matched against requests by type).
 * `relayable`: the text holds nothing the value lost (a duplicate key's dropped value), so it may
 * go on unless a mask rewrote the value. `NaN`, `Infinity` and `-Infinity` are read as null: Python's
 * json.dumps writes them for floats and MCP's Python client reads them, so a tool server's answer
 * holding one is still a message whose strings the node reads decoded and whose id completes its
 * call (the text goes on with them as written; re-serialised, they are null). Throws on text that
 * is not JSON otherwise.
 */
export function parseRelayed(text: string): { value: unknown; relayable: boolean } {
  let json = text;
  let parsed: ReturnType<typeof parseAsWritten>;
  try {
    parsed = parseAsWritten(json);
  } catch (err) {
    const finite = withNonFiniteAsNull(text);
    if (finite === undefined) throw err;
    json = finite;
    parsed = parseAsWritten(json);
  }
  const { value, longIntegers, losesStrings } = parsed;
  if (longIntegers) keepEnvelopeNumbers(value, JSON.parse(json));
  return { value, relayable: !losesStrings };
}

/** JSON's two-character escapes: the character after the backslash, and the one it writes. */
const SHORT_ESCAPES: Readonly<Record<string, string>> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
const UNICODE_ESCAPE = /^u[0-9A-Fa-f]{4}/;

/**
 * `text` (JSON that did not parse, even with NaN read as null) with its JSON string escapes decoded
 * wherever they are, an escape cut short or unknown kept as written: what output rules read, so a
 * `\u673a` (Python escapes every character past ASCII) or `\u0040` hides no match from them.
 */
export function withJsonEscapesDecoded(text: string): string {
  let at = text.indexOf('\\');
  if (at === -1) return text;
  let out = '';
  let copied = 0;
  while (at !== -1 && at + 1 < text.length) {
    const after = text[at + 1]!;
    let decoded = SHORT_ESCAPES[after];
    let length = 2;
    if (after === 'u' && UNICODE_ESCAPE.test(text.slice(at + 1, at + 6))) {
      decoded = String.fromCharCode(Number.parseInt(text.slice(at + 2, at + 6), 16));
      length = 6;
    }
    if (decoded === undefined) {
      at = text.indexOf('\\', at + 1);
      continue;
    }
    out += text.slice(copied, at) + decoded;
    copied = at + length;
    at = text.indexOf('\\', copied);
  }
  return out + text.slice(copied);
}

const NON_FINITE_HINT = /NaN|Infinity/;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * `text` with each `NaN`, `Infinity` and `-Infinity` outside strings written `null` (same string
 * literals, so a duplicate key is still told by their count); undefined when it has none.
 */
function withNonFiniteAsNull(text: string): string | undefined {
  if (!NON_FINITE_HINT.test(text)) return undefined;
  let out = '';
  let copied = 0;
  for (let i = 0; i < text.length;) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      // Past the string literal: an escape takes the character after it along.
      i += 1;
      while (i < text.length && text.charCodeAt(i) !== QUOTE) i += text.charCodeAt(i) === BACKSLASH ? 2 : 1;
      i += 1;
      continue;
    }
    const token = text.startsWith('NaN', i) ? 3 : text.startsWith('Infinity', i) ? 8 : text.startsWith('-Infinity', i) ? 9 : 0;
    if (token === 0) {
      i += 1;
      continue;
    }
    out += `${text.slice(copied, i)}null`;
    i += token;
    copied = i;
  }
  return copied === 0 ? undefined : out + text.slice(copied);
}

/**
 * A JSON-RPC id as its message wrote it, to match answers with requests and to echo it: an integer
 * past 2^53 (which parseRelayed reads as its digits) is a bigint, so it equals the same integer in
 * another message, and not the string of its digits, which is another id.
 */
export type JsonRpcId = string | number | bigint;

/** The id of a message parseRelayed gave; undefined when it has none (or null). */
export function idAsWritten(message: Record<string, unknown>): JsonRpcId | undefined {
  const id = message.id;
  if (typeof id === 'number') return id;
  if (typeof id !== 'string') return undefined;
  return isLongIntegerAt(message, 'id') ? BigInt(id) : id;
}

/** `id` as JSON text: an integer past 2^53 as the number it was, digit for digit. */
export function idJson(id: JsonRpcId): string {
  return typeof id === 'bigint' ? id.toString() : JSON.stringify(id);
}

/** `exact`'s messages with the safe-integer `id` and `error.code` of `plain` (the same text parsed by JSON.parse). */
function keepEnvelopeNumbers(exact: unknown, plain: unknown): void {
  const exactMessages = Array.isArray(exact) ? (exact as unknown[]) : [exact];
  const plainMessages = Array.isArray(plain) ? (plain as unknown[]) : [plain];
  exactMessages.forEach((message, i) => {
    const original = plainMessages[i];
    if (!isRecord(message) || !isRecord(original)) return;
    if (typeof message.id === 'string' && Number.isSafeInteger(original.id)) message.id = original.id;
    const error = message.error;
    if (isRecord(error) && isRecord(original.error) && typeof error.code === 'string' && Number.isSafeInteger(original.error.code)) error.code = original.error.code;
  });
}

/** The texts of `holder[index]`: a well-formed message's fields but its envelope, or every string of anything else. */
function addMessage(walk: JsonStringWalk, holder: unknown[], index: number): void {
  const message = holder[index];
  if (!isRecord(message) || !isWellFormed(message)) {
    walk.add(holder, index);
    return;
  }
  for (const field of Object.keys(message)) {
    if (ENVELOPE_FIELDS.has(field)) continue;
    // The parts JSON-RPC names hold the text; their names are not text. Any other field (a server's
    // extra top-level key) is checked with its name.
    if (MESSAGE_TEXT_FIELDS.has(field)) walk.add(message, field);
    else walk.addField(message, field);
  }
}

/**
 * A JSON-RPC 2.0 request, notification or response, as far as its envelope goes: its `jsonrpc`,
 * `method` and `id` are what JSON-RPC says, so they are not text. The parts are not judged.
 */
function isWellFormed(message: Record<string, unknown>): boolean {
  if (message.jsonrpc !== '2.0') return false;
  const id = message.id;
  if (id !== undefined && id !== null && typeof id !== 'string' && typeof id !== 'number') return false;
  if (Object.hasOwn(message, 'method')) return typeof message.method === 'string';
  return Object.hasOwn(message, 'result') || Object.hasOwn(message, 'error');
}

const MESSAGE_TEXT_FIELDS: ReadonlySet<string> = new Set(['params', 'result', 'error']);
const ENVELOPE_FIELDS: ReadonlySet<string> = new Set(['jsonrpc', 'id', 'method']);
