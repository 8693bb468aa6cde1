/**
 * Output guardrails over a tool server's event stream (MCP streamable HTTP). Every SSE event carries
 * one complete JSON-RPC message (or batch), so each is checked whole, like a JSON answer: its texts
 * (messageTexts) are masked in place and the event re-serialised with its other lines (`event:`,
 * `id:`, `retry:`) kept; events without text pass byte for byte. Data that is not JSON is checked
 * as one text. A block ends the stream: the blocked event is never sent, and each request of the
 * POST not answered yet gets a JSON-RPC error naming ZN_ERR_GUARDRAIL_BLOCKED, so the client's
 * pending calls fail instead of hanging.
 */
import { zenovaError } from '../../errors.js';
import type { TextSlot } from '../../pipeline/context.js';
import type { Rejection } from '../../pipeline/stage.js';
import { isRecord } from '../text-slot.js';
import { messageTexts } from './jsonrpc-message.js';

/** JSON-RPC error code of the error answer a blocked stream ends with (implementation-defined range). */
export const GUARDRAIL_BLOCKED_RPC_CODE = -32000;

export interface EventGuard {
  /** The output rules over one event's slots: a rejection when the event must not be delivered. */
  check(slots: TextSlot[]): Rejection | undefined;
  /** Ids of the POST's requests the stream still owes an answer (answered ones are removed). */
  pending: Set<string | number>;
  /** The stream was stopped by `rejection` (called before the error answers are yielded). */
  blocked(rejection: Rejection): void;
  /** The (masked) text of a delivered event, for the record. */
  keep(slots: readonly TextSlot[]): void;
}

const encoder = new TextEncoder();

/**
 * `source` (the event stream's bytes) with every event checked. Only a partial event is buffered;
 * one longer than `maxEventChars` fails the stream (ZN_ERR_UPSTREAM_ERROR), as it cannot be checked.
 */
export async function* guardEventStream(source: AsyncIterable<Uint8Array>, guard: EventGuard, maxEventChars: number): AsyncGenerator<Uint8Array> {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of source) {
    buffer += decoder.decode(chunk, { stream: true });
    if (buffer.includes('\r')) buffer = normaliseLineEnds(buffer);
    let out = '';
    let start = 0;
    let boundary: number;
    while ((boundary = buffer.indexOf('\n\n', start)) !== -1) {
      const checked = checkEvent(buffer.slice(start, boundary), guard);
      start = boundary + 2;
      if (typeof checked !== 'string') {
        // Returning ends the loop over `source`, which closes the tool server's stream.
        yield encoder.encode(out + blockedAnswers(checked, guard));
        return;
      }
      out += `${checked}\n\n`;
    }
    if (start > 0) buffer = buffer.slice(start);
    if (buffer.length > maxEventChars) throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `The tool server sent an event longer than ${maxEventChars} characters.`);
    if (out.length > 0) yield encoder.encode(out);
  }
  buffer = (buffer + decoder.decode()).replace(/\r\n?/g, '\n').replace(/\n+$/, '');
  if (buffer.length === 0) return;
  // A last event without its blank line.
  const checked = checkEvent(buffer, guard);
  yield encoder.encode(typeof checked === 'string' ? `${checked}\n\n` : blockedAnswers(checked, guard));
}

/** One event's lines, checked: the lines to send, or the rejection that stops the stream. */
function checkEvent(block: string, guard: EventGuard): string | Rejection {
  const lines = block.split('\n');
  const dataLines = new Set<number>();
  let firstData = -1;
  const values: string[] = [];
  lines.forEach((line, index) => {
    if (line !== 'data' && !line.startsWith('data:')) return;
    dataLines.add(index);
    if (firstData === -1) firstData = index;
    const value = line.slice(5);
    values.push(value.startsWith(' ') ? value.slice(1) : value);
  });
  // Comments and keep-alives carry nothing a client reads as a message.
  if (firstData === -1) return block;
  const data = values.join('\n');
  const mark = { dirty: false };
  let message: unknown;
  let slots: TextSlot[];
  try {
    message = JSON.parse(data);
    slots = messageTexts(message, mark);
  } catch {
    message = undefined;
    slots = [{ text: data }];
  }
  const rejection = guard.check(slots);
  if (rejection !== undefined) return rejection;
  if (message !== undefined) answered(message, guard.pending);
  guard.keep(slots);
  const changed = message === undefined ? slots[0]!.text !== data : mark.dirty;
  if (!changed) return block;
  const next = message === undefined ? slots[0]!.text : JSON.stringify(message);
  const nextData = next.split('\n').map((line) => `data: ${line}`);
  // The data lines become one (JSON has no raw newlines) where the first one was.
  const kept = lines.filter((_, index) => !dataLines.has(index));
  kept.splice(firstData, 0, ...nextData);
  return kept.join('\n');
}

function answered(message: unknown, pending: Set<string | number>): void {
  for (const m of Array.isArray(message) ? message : [message]) {
    if (isRecord(m) && (typeof m.id === 'string' || typeof m.id === 'number') && ('result' in m || 'error' in m)) pending.delete(m.id);
  }
}

/** The events that end a blocked stream: one JSON-RPC error per request still unanswered. */
function blockedAnswers(rejection: Rejection, guard: EventGuard): string {
  guard.blocked(rejection);
  let out = '';
  for (const id of guard.pending) {
    const error = { code: GUARDRAIL_BLOCKED_RPC_CODE, message: rejection.error.message, data: { code: rejection.error.code } };
    out += `event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id, error })}\n\n`;
  }
  guard.pending.clear();
  return out;
}

function normaliseLineEnds(buffer: string): string {
  // A CR at the very end waits for the next chunk, which may start with its LF.
  const keepCr = buffer.endsWith('\r');
  const body = (keepCr ? buffer.slice(0, -1) : buffer).replace(/\r\n?/g, '\n');
  return keepCr ? `${body}\r` : body;
}
