/**
 * The JSON-RPC 2.0 messages an MCP client POSTs (streamable HTTP): one request, notification or
 * response object, or a batch array of them. Only the envelope is checked; `params`, `result` and
 * `error` belong to the tool server. Also: the label a call is recorded under, and the text of
 * messages (both ways) as slots guardrails can read and rewrite.
 */
import { z } from 'zod';
import type { TextSlot } from '../../pipeline/context.js';
import { markPartial } from '../partial-texts.js';
import { isRecord } from '../text-slot.js';
import type { DirtyMark } from '../text-slot.js';

/** More than this many messages in one POST is refused (MCP clients send one at a time). */
export const MAX_BATCH_MESSAGES = 100;
/**
 * Strings (values and keys) guardrails look at per body, and nesting followed. Past either the
 * slots are marked partial: a key with guardrail rules is then refused (fail closed).
 */
export const MAX_TEXT_SLOTS = 50_000;
export const MAX_DEPTH = 64;

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
 * The text of JSON-RPC messages that guardrails check, as slots: every string value and every
 * object key under `params` (requests and notifications), `result` and `error` (responses), at any
 * depth. The envelope (`jsonrpc`, `id`, `method`) is not text. Keys come after all values, because
 * masking a key renames it and the value slots address their holder by key. Past MAX_TEXT_SLOTS
 * strings or MAX_DEPTH levels the list is marked partial, and guardrails with rules refuse it.
 * Writing a slot marks `owner` dirty (an event stream re-serialises only what changed).
 */
export function messageTexts(post: unknown, owner?: DirtyMark): TextSlot[] {
  const walk = new TextWalk(owner);
  for (const message of Array.isArray(post) ? post : [post]) {
    if (!isRecord(message)) continue;
    for (const field of MESSAGE_TEXT_FIELDS) {
      if (!Object.hasOwn(message, field)) continue;
      if (typeof message[field] === 'string') walk.value(message, field);
      else walk.visit(message[field], 1);
    }
  }
  return walk.finish();
}

const MESSAGE_TEXT_FIELDS = ['params', 'result', 'error'] as const;

class TextWalk {
  private readonly values: TextSlot[] = [];
  private readonly keys: TextSlot[] = [];
  private partial = false;

  constructor(private readonly owner: DirtyMark | undefined) {}

  private get full(): boolean {
    return this.values.length + this.keys.length >= MAX_TEXT_SLOTS;
  }

  value(holder: Record<string, unknown> | unknown[], key: string | number): void {
    if (this.full) this.partial = true;
    else this.values.push(new ValueSlot(holder, key, this.owner));
  }

  visit(node: unknown, depth: number): void {
    if (typeof node !== 'object' || node === null || this.partial) return;
    if (depth > MAX_DEPTH) {
      this.partial = true;
      return;
    }
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length && !this.partial; i += 1) {
        if (typeof node[i] === 'string') this.value(node, i);
        else this.visit(node[i], depth + 1);
      }
      return;
    }
    const holder = node as Record<string, unknown>;
    for (const key of Object.keys(holder)) {
      if (this.full) {
        this.partial = true;
        return;
      }
      this.keys.push(new KeySlot(holder, key, this.owner));
      if (typeof holder[key] === 'string') this.value(holder, key);
      else this.visit(holder[key], depth + 1);
      if (this.partial) return;
    }
  }

  finish(): TextSlot[] {
    const slots = this.keys.length === 0 ? this.values : this.values.concat(this.keys);
    if (this.partial) markPartial(slots);
    return slots;
  }
}

/** A string value in an object or array. */
class ValueSlot implements TextSlot {
  constructor(
    private readonly holder: Record<string, unknown> | unknown[],
    private readonly key: string | number,
    private readonly owner: DirtyMark | undefined,
  ) {}

  get text(): string {
    const value = (this.holder as Record<string | number, unknown>)[this.key];
    return typeof value === 'string' ? value : '';
  }

  set text(next: string) {
    // defineProperty: an own "__proto__" key from JSON.parse stays a plain property.
    Object.defineProperty(this.holder, this.key, { value: next, writable: true, enumerable: true, configurable: true });
    if (this.owner !== undefined) this.owner.dirty = true;
  }
}

/** An object key: masking renames it (a numbered suffix when the new name is taken). */
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
    for (let n = 2; Object.hasOwn(this.holder, name); n += 1) name = `${next} (${n})`;
    Object.defineProperty(this.holder, name, { value: this.holder[this.key], writable: true, enumerable: true, configurable: true });
    delete this.holder[this.key];
    this.key = name;
    if (this.owner !== undefined) this.owner.dirty = true;
  }
}
