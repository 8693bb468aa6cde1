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
 * call is sent back with the conversation.
 */
import type { TextSlot } from '../../pipeline/context.js';
import { FieldSlot, isRecord } from '../text-slot.js';
import { isKnownToolCall, unknownPartSlots, withoutPlaceholderBrackets } from './chat-content-parts.js';

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

/** A made-up tool name in a JSON answer: checked, not the answer's text; a mask writes placeholders without brackets. */
class ToolNameSlot extends FieldSlot {
  readonly notGenerated = true;

  override get text(): string {
    return super.text;
  }

  override set text(value: string) {
    super.text = value === super.text ? value : withoutPlaceholderBrackets(value);
  }
}

/**
 * Slots for the names of a JSON answer message's tool calls (`function` and `custom` ones: a call of
 * another type has every string checked already) and of its legacy `function_call` that `declared`
 * does not hold. A name that is not a string (no shape OpenAI sends) has every string in it checked.
 */
export function undeclaredToolNameSlots(message: Record<string, unknown>, declared: ReadonlySet<string>, into: TextSlot[]): void {
  const calls = message.tool_calls;
  if (Array.isArray(calls)) {
    for (const call of calls) {
      if (!isRecord(call) || !isKnownToolCall(call)) continue;
      for (const holder of [call.function, call.custom]) if (isRecord(holder)) undeclaredNameSlot(holder, declared, into);
    }
  }
  if (isRecord(message.function_call)) undeclaredNameSlot(message.function_call, declared, into);
}

function undeclaredNameSlot(holder: Record<string, unknown>, declared: ReadonlySet<string>, into: TextSlot[]): void {
  const name = holder.name;
  if (typeof name === 'string') {
    if (name !== '' && !declared.has(name)) into.push(new ToolNameSlot(holder, 'name'));
  } else if (typeof name === 'object' && name !== null) {
    unknownPartSlots(name as Record<string, unknown>, into);
  }
}

/**
 * A made-up tool name in a stream chunk (chat-stream.ts), which carries it whole: a part of its own
 * on a channel no choice's running text uses, ended in that chunk. The guard writes it in pieces
 * (what it releases, then the rest), so the name goes into the chunk only when the chunk is
 * serialised (commit), and only when a mask changed it: a name that passed goes out as it came.
 */
export class StreamToolNameSlot implements TextSlot {
  readonly notGenerated = true;
  private readonly original: string;
  private current: string;
  private written: string;

  constructor(
    private readonly holder: Record<string, unknown>,
    readonly channel: number,
    readonly part: number,
  ) {
    this.original = this.current = this.written = typeof holder.name === 'string' ? holder.name : '';
  }

  get text(): string {
    return this.current;
  }

  set text(value: string) {
    this.current = value;
  }

  /** Writes a changed name into its chunk; true when that changed the chunk. */
  commit(): boolean {
    if (this.current === this.written) return false;
    this.holder.name = this.current === this.original ? this.original : withoutPlaceholderBrackets(this.current);
    this.written = this.current;
    return true;
  }
}
