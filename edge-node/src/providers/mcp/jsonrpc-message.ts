/**
 * The JSON-RPC 2.0 messages an MCP client POSTs (streamable HTTP): one request, notification or
 * response object, or a batch array of them. Only the envelope is checked; `params`, `result` and
 * `error` belong to the tool server. Also: the label a call is recorded under, and the text of
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
 * go on unless a mask rewrote the value. Throws on text that is not JSON.
 */
export function parseRelayed(text: string): { value: unknown; relayable: boolean } {
  const { value, longIntegers, losesStrings } = parseAsWritten(text);
  if (longIntegers) keepEnvelopeNumbers(value, JSON.parse(text));
  return { value, relayable: !losesStrings };
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
