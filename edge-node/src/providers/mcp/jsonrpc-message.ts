/**
 * The JSON-RPC 2.0 messages an MCP client POSTs (streamable HTTP): one request, notification or
 * response object, or a batch array of them. Only the envelope is checked; `params`, `result` and
 * `error` belong to the tool server. Also: the label a call is recorded under, and the caller's
 * text in `tools/call` arguments as slots guardrails can read and rewrite.
 */
import { z } from 'zod';
import type { TextSlot } from '../../pipeline/context.js';

/** More than this many messages in one POST is refused (MCP clients send one at a time). */
export const MAX_BATCH_MESSAGES = 100;
/** Text leaves looked at per request and nesting followed; deeper or further text is not inspected. */
const MAX_TEXT_SLOTS = 10_000;
const MAX_DEPTH = 64;

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

/** Slots over every string leaf under `value`, each writing back into its parent. */
export function stringLeaves(value: unknown, into: TextSlot[] = [], depth = 0): TextSlot[] {
  if (depth > MAX_DEPTH || typeof value !== 'object' || value === null) return into;
  const holder = value as Record<string, unknown>;
  for (const key of Object.keys(holder)) {
    if (into.length >= MAX_TEXT_SLOTS) break;
    const child = holder[key];
    if (typeof child === 'string') into.push(slot(holder, key));
    else stringLeaves(child, into, depth + 1);
  }
  return into;
}

function slot(holder: Record<string, unknown>, key: string): TextSlot {
  return {
    get text(): string {
      return holder[key] as string;
    },
    set text(next: string) {
      holder[key] = next;
    },
  };
}

/** The caller's text: string leaves of `params.arguments` in each tools/call. */
export function toolCallTexts(post: JsonRpcPost): TextSlot[] {
  const slots: TextSlot[] = [];
  for (const message of Array.isArray(post) ? post : [post]) {
    if (methodOf(message) !== 'tools/call') continue;
    const p = (message as { params?: unknown }).params;
    if (typeof p === 'object' && p !== null && !Array.isArray(p)) stringLeaves((p as Record<string, unknown>).arguments, slots);
  }
  return slots;
}

/** The tool server's text in a JSON answer: `text` of each content item in each result. */
export function toolResultTexts(answer: unknown): TextSlot[] {
  const slots: TextSlot[] = [];
  for (const message of Array.isArray(answer) ? answer : [answer]) {
    if (typeof message !== 'object' || message === null) continue;
    const result = (message as { result?: unknown }).result;
    if (typeof result !== 'object' || result === null) continue;
    const content = (result as { content?: unknown }).content;
    if (!Array.isArray(content)) continue;
    for (const item of content) {
      if (typeof item === 'object' && item !== null && typeof (item as { text?: unknown }).text === 'string') {
        slots.push(slot(item as Record<string, unknown>, 'text'));
      }
      if (slots.length >= MAX_TEXT_SLOTS) return slots;
    }
  }
  return slots;
}
