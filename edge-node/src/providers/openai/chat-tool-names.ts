/**
 * Tool call names in an OpenAI chat answer, for output guardrails. The model repeats the names the
 * caller's tools declare (`tools[].function.name`, a custom tool's `tools[].custom.name`, a flat
 * `tools[].name`, the legacy `functions[].name`): those are the caller's own, written by its
 * developers as its tool definitions are (not checked, guardrails/README.md), and a mask would
 * rename a function the client dispatches on. Any other name in an answer's
 * `tool_calls[].function.name`, `tool_calls[].custom.name` or `function_call.name` is text the model
 * made up (it can be told to "call" a tool named after what it must not say), so output rules check
 * it like content, masked or blocking; before, it went out unchecked. As for an Anthropic
 * `tool_use` name (messages-request.ts, CallerChosenStrings: the same rule, an exact match with a
 * declared name), it is only checked (TextSlot.notGenerated): neither kept as the answer's text
 * nor estimated as output. A mask writes its placeholder without brackets (`send_EMAIL`), as in a
 * message's `name` (NameSlot): OpenAI takes function names of `[a-zA-Z0-9_-]` only, also when the
 * call is sent back with the conversation. A name, a call or `tool_calls` itself of a shape OpenAI
 * never sends (a name that is not a string, `function` as an array, `tool_calls` as an object, a
 * `tool_calls` entry that is not an object, `function_call` not an object) has every string and
 * number in it checked (`type` keys too: in a name they are no type tags), in a JSON answer and in
 * a request's message alike (oddShapeSlots, chat-completions.ts); in a stream, where it cannot be
 * placed in a name's text, it is blocked under output rules. A string name at the top level of a
 * call is checked in a JSON answer as the others are.
 *
 * In a stream a name may come in pieces (openai-python's stream helper joins them), so under output
 * rules a call's name is held whole (HeldWholeSlot, guardrails/stream-guard.ts) until its call's
 * arguments (or custom input) start, another call of its choice starts, or its choice finishes;
 * then the joined name is checked (or left alone when declared) and goes out whole in one delta.
 */
import type { HeldWholeSlot } from '../../guardrails/stream-guard.js';
import type { TextSlot } from '../../pipeline/context.js';
import { MAX_DEPTH } from '../json-string-slots.js';
import { isRecord } from '../text-slot.js';
import { ToolNameSlot, isKnownToolCall, withoutPlaceholderBrackets } from './chat-content-parts.js';

/** The tool names the caller's request declares (see the file comment); none for a request without tools. */
export function callerToolNames(request: Record<string, unknown> | undefined): ReadonlySet<string> {
  const names = new Set<string>();
  const tools = request?.tools;
  if (Array.isArray(tools)) {
    for (const tool of tools) {
      if (!isRecord(tool)) continue;
      for (const holder of [tool, tool.function, tool.custom]) if (isRecord(holder) && typeof holder.name === 'string') names.add(holder.name);
    }
  }
  const functions = request?.functions;
  if (Array.isArray(functions)) for (const fn of functions) if (isRecord(fn) && typeof fn.name === 'string') names.add(fn.name);
  return names;
}

/**
 * Slots for the names of a JSON answer message's tool calls (`function` and `custom` ones, a name
 * at the top level of a call too: no shape OpenAI sends, but a client may read it) and of its
 * legacy `function_call` that are strings `declared` does not hold. The rest is read with the
 * message's other texts, in an answer as in a request (chat-completions.ts): a call of another
 * type, its `type` included (unknownTypeSlots), and a name, a `function` or `custom`, a
 * `tool_calls` entry, `tool_calls` or `function_call` of a shape OpenAI never sends (oddShapeSlots).
 */
export function undeclaredToolNameSlots(message: Record<string, unknown>, declared: ReadonlySet<string>, into: TextSlot[]): void {
  const calls = message.tool_calls;
  if (Array.isArray(calls)) {
    for (const call of calls) {
      if (!isRecord(call) || !isKnownToolCall(call)) continue;
      undeclaredNameSlot(call, declared, into);
      for (const key of ['function', 'custom']) {
        const holder = call[key];
        if (isRecord(holder)) undeclaredNameSlot(holder, declared, into);
      }
    }
  }
  if (isRecord(message.function_call)) undeclaredNameSlot(message.function_call, declared, into);
}

function undeclaredNameSlot(holder: Record<string, unknown>, declared: ReadonlySet<string>, into: TextSlot[]): void {
  const name = holder.name;
  if (typeof name === 'string' && name !== '' && !declared.has(name)) into.push(new ToolNameSlot(holder, 'name'));
}

/**
 * Whether a streamed fragment of a tool call of an unknown type carries text in its `type` (one
 * neither `function` nor `custom`, which unknownTypeSlots checks in a JSON answer): typeHoldsText.
 */
export function unknownCallTypeHoldsText(call: Record<string, unknown>): boolean {
  return !isKnownToolCall(call) && typeHoldsText(call.type);
}

/**
 * Whether the `type` of a streamed content part or tool call of an unknown type (no tag the node
 * knows) carries text: a string but the empty one, a number, or either inside (`type` keys included).
 */
export function typeHoldsText(type: unknown): boolean {
  return type !== '' && holdsNameText(type);
}

/** Whether `value` holds a string or a number at any depth, `type` keys included; past MAX_DEPTH taken as yes. */
export function holdsNameText(value: unknown, depth = 1): boolean {
  if (typeof value === 'string' || typeof value === 'number') return true;
  if (typeof value !== 'object' || value === null) return false;
  if (depth > MAX_DEPTH) return true;
  const record = value as Record<string, unknown>;
  for (const key of Object.keys(record)) if (holdsNameText(record[key], depth + 1)) return true;
  return false;
}

/**
 * A piece of a tool call's name in a stream chunk (chat-stream.ts), held whole by output rules
 * (HeldWholeSlot): the guard empties each piece and writes the checked whole name into the one
 * that ends it. The chunk changes only when it is serialised (commit), and only when the guard
 * changed the piece: a name that passed without output rules goes out as it came. `place` gives
 * the object the name goes in (created on first use for a piece that ends a name in a chunk
 * without a fragment of that call).
 */
export class StreamToolNameSlot implements HeldWholeSlot {
  readonly notGenerated = true;
  readonly heldWhole = true;
  private current: string;
  private written: string;
  private holder: Record<string, unknown> | undefined;

  constructor(
    private readonly place: () => Record<string, unknown>,
    piece: string,
    /** The name so far, this piece included. */
    private readonly joined: string,
    readonly endsHeld: boolean,
    readonly channel: number,
    readonly part: number,
    private readonly declared: ReadonlySet<string>,
  ) {
    this.current = this.written = piece;
  }

  get text(): string {
    return this.current;
  }

  set text(value: string) {
    this.current = value;
  }

  unchecked(whole: string): boolean {
    return this.declared.has(whole);
  }

  /** Writes a changed name into its chunk; true when that changed the chunk. */
  commit(): boolean {
    if (this.current === this.written) return false;
    const holder = (this.holder ??= this.place());
    if (this.current === '') delete holder.name;
    else holder.name = this.current === this.joined ? this.joined : withoutPlaceholderBrackets(this.current);
    this.written = this.current;
    return true;
  }
}
