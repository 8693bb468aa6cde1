/**
 * Output guardrails over a tool server's event stream (MCP streamable HTTP). Every SSE event carries
 * one complete JSON-RPC message (or batch), so each is checked whole, like a JSON answer: its texts
 * (jsonTexts, integers of 16 digits or more as their digits: parseRelayed) are masked in place and
 * the event re-serialised with its other lines (`event:`, `id:`, `retry:`) kept; those lines and
 * comments are checked too (otherLines); events nothing rewrote pass byte for byte. JSON that is not a message or a
 * batch of messages (a bare string, an array of strings, an object such as `{"detail": …}`) has
 * every string in it checked; data that is not JSON (NaN and Infinity read as null: parseRelayed) is
 * checked, and masked, as one text as written, then read again with its JSON escapes decoded: a
 * match only there blocks the event (matchedOnlyDecoded). A block ends the stream: the
 * blocked event is never sent, and each request of the POST not answered yet gets a JSON-RPC error
 * naming ZN_ERR_GUARDRAIL_BLOCKED, so the client's pending calls fail instead of hanging.
 */
import { zenovaError } from '../../errors.js';
import type { TextSlot } from '../../pipeline/context.js';
import { reject } from '../../pipeline/stage.js';
import type { Rejection } from '../../pipeline/stage.js';
import { stringifyAsWritten } from '../json-string-slots.js';
import { isRecord } from '../text-slot.js';
import { idAsWritten, jsonTexts, parseRelayed, withJsonEscapesDecoded } from './jsonrpc-message.js';
import type { JsonRpcId } from './jsonrpc-message.js';
import { rpcErrorEvents } from './mcp-stream-failure.js';

export interface EventGuard {
  /** The output rules over one event's slots: a rejection when the event must not be delivered. */
  check(slots: TextSlot[]): Rejection | undefined;
  /** Ids of the POST's requests the stream still owes an answer (answered ones are removed). */
  pending: Set<JsonRpcId>;
  /** The stream was stopped by `rejection` (called before the error answers are yielded). */
  blocked(rejection: Rejection): void;
  /** The (masked) text of a delivered event, for the record. */
  keep(slots: readonly TextSlot[]): void;
}

const encoder = new TextEncoder();

/**
 * `source` (the event stream's bytes) with every event checked. Only a partial event is buffered;
 * one longer than `maxEventChars` fails the stream (ZN_ERR_UPSTREAM_ERROR), as it cannot be checked.
 * Work is linear in the stream's size: line ends are normalised and boundaries searched in each new
 * chunk only, and an unfinished event's pieces are joined once, when its boundary comes.
 */
export async function* guardEventStream(source: AsyncIterable<Uint8Array>, guard: EventGuard, maxEventChars: number): AsyncGenerator<Uint8Array> {
  const decoder = new TextDecoder();
  const event = new PendingEvent();
  let carriedCr = false;
  for await (const chunk of source) {
    let text = decoder.decode(chunk, { stream: true });
    if (carriedCr) text = `\r${text}`;
    // A CR at the very end waits for the next chunk, which may start with its LF.
    carriedCr = text.endsWith('\r');
    if (carriedCr) text = text.slice(0, -1);
    if (text.includes('\r')) text = text.replace(/\r\n?/g, '\n');
    let out = '';
    let from = 0;
    for (;;) {
      let block: string;
      if (from === 0 && event.endsWithLf && text.startsWith('\n')) {
        // The blank line's first LF ended the previous chunk.
        block = event.take().slice(0, -1);
        from = 1;
      } else {
        const boundary = text.indexOf('\n\n', from);
        if (boundary === -1) break;
        block = event.take(text.slice(from, boundary));
        from = boundary + 2;
      }
      const checked = checkEvent(block, guard);
      if (typeof checked !== 'string') {
        // Returning ends the loop over `source`, which closes the tool server's stream.
        yield encoder.encode(out + blockedAnswers(checked, guard));
        return;
      }
      // An event left with no line (a comment a mask dropped) is not sent at all.
      if (checked.length > 0) out += `${checked}\n\n`;
    }
    event.add(from === 0 ? text : text.slice(from));
    if (event.length > maxEventChars) throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `The tool server sent an event longer than ${maxEventChars} characters.`);
    if (out.length > 0) yield encoder.encode(out);
  }
  const rest = (event.take() + (carriedCr ? '\r' : '') + decoder.decode()).replace(/\r\n?/g, '\n').replace(/\n+$/, '');
  if (rest.length === 0) return;
  // A last event without its blank line.
  const checked = checkEvent(rest, guard);
  if (checked !== '') yield encoder.encode(typeof checked === 'string' ? `${checked}\n\n` : blockedAnswers(checked, guard));
}

/** The received part of an event whose blank line has not come yet, kept as pieces. */
class PendingEvent {
  private pieces: string[] = [];
  length = 0;
  endsWithLf = false;

  add(piece: string): void {
    if (piece.length === 0) return;
    this.pieces.push(piece);
    this.length += piece.length;
    this.endsWithLf = piece.endsWith('\n');
  }

  /** The whole event (with `last` appended), leaving nothing pending. */
  take(last = ''): string {
    const whole = this.pieces.length === 0 ? last : this.pieces.join('') + last;
    this.pieces = [];
    this.length = 0;
    this.endsWithLf = false;
    return whole;
  }
}

/**
 * An event's lines other than `data:` (a comment, `id:`, `event:`, a field clients ignore), each
 * whole as a slot: a client shows none of them as a message, but a raw HTTP client reads every byte
 * of them, field names included, and an `id` goes back to the tool server as Last-Event-ID, so the
 * output rules see them too. Only `retry:` with digits alone (a reconnection delay) is left out.
 * A keep-alive comment (`:`, `: ping`) is checked like any other.
 */
interface OtherLine {
  index: number;
  comment: boolean;
  slot: TextSlot;
  /** The line before the rules ran. */
  before: string;
}

const RETRY_LINE = /^retry: ?\d*$/;

function otherLines(lines: readonly string[], dataLines: ReadonlySet<number>): OtherLine[] {
  const found: OtherLine[] = [];
  lines.forEach((line, index) => {
    if (dataLines.has(index) || line.length === 0 || RETRY_LINE.test(line)) return;
    found.push({ index, comment: line.startsWith(':'), slot: { text: line }, before: line });
  });
  return found;
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
  const others = otherLines(lines, dataLines);
  if (firstData === -1) {
    // No message: only its other lines to check (a comment, a lone id).
    if (others.length === 0) return block;
    const rejection = guard.check(others.map((o) => o.slot));
    if (rejection !== undefined) return rejection;
    return others.some(masked) ? rebuilt(lines, others) : block;
  }
  const data = values.join('\n');
  const mark = { dirty: false };
  // Any JSON is walked as parsed (escapes decoded): a message's fields, or every string of JSON
  // that is not one (a `{"detail": …}`, a bare string); data that is not JSON is one text.
  // Parsed as the data goes on unless rewritten: integers of 16 digits or more as their digits.
  let box: [unknown] | undefined;
  let relayable = true;
  try {
    const parsed = parseRelayed(data);
    box = [parsed.value];
    relayable = parsed.relayable;
  } catch {
    box = undefined;
  }
  // Data that is not JSON (even with NaN read as null) is checked, and masked, as written.
  const slots: TextSlot[] = box !== undefined ? jsonTexts(box, mark) : [{ text: data }];
  const rejection = guard.check(others.length === 0 ? slots : [...slots, ...others.map((o) => o.slot)]);
  if (rejection !== undefined) return rejection;
  if (box === undefined) {
    const hidden = matchedOnlyDecoded(slots[0]!.text, guard);
    if (hidden !== undefined) return hidden;
  }
  if (box !== undefined) answered(box[0], guard.pending);
  guard.keep(slots);
  // Data holding strings its parsed value lost (a duplicate key: JSON.parse keeps the last) goes out
  // re-serialised from what was checked, not as it came.
  const changed = box === undefined ? slots[0]!.text !== data : mark.dirty || !relayable;
  if (!changed) return others.some(masked) ? rebuilt(lines, others) : block;
  const next = box === undefined ? slots[0]!.text : stringifyAsWritten(box[0]);
  // The data lines become one (JSON has no raw newlines) where the first one was.
  return rebuilt(lines, others, { lines: dataLines, first: firstData, next: next.split('\n').map((line) => `data: ${line}`) });
}

const masked = (line: OtherLine): boolean => line.slot.text !== line.before;

/**
 * The rejection for data that is not JSON whose text to send (`text`, masked) matches a rule only
 * once its JSON escapes are decoded (`\u673a` for `机`, as Python writes it). Such data is blocked,
 * not masked: a mask would have to send the decoded text, changing every escape-like sequence in it
 * (`C:\new` would gain a newline).
 */
function matchedOnlyDecoded(text: string, guard: EventGuard): Rejection | undefined {
  const decoded = withJsonEscapesDecoded(text);
  if (decoded === text) return undefined;
  const slot = { text: decoded };
  const rejection = guard.check([slot]);
  if (rejection !== undefined || slot.text === decoded) return rejection;
  return reject('ZN_ERR_GUARDRAIL_BLOCKED', 'Blocked by guardrail policy: a mask matched a tool server event that is not JSON only with its JSON escapes decoded, and the event cannot be rewritten as written.');
}

/**
 * The event's lines again, with the other lines a mask changed written back masked (a comment
 * dropped: it carries nothing a client needs), and, when `data` is given, its data lines replaced.
 */
function rebuilt(lines: readonly string[], others: readonly OtherLine[], data?: { lines: ReadonlySet<number>; first: number; next: string[] }): string {
  const byIndex = new Map(others.map((o) => [o.index, o]));
  const out: string[] = [];
  lines.forEach((line, index) => {
    if (data !== undefined && index === data.first) out.push(...data.next);
    if (data?.lines.has(index) === true) return;
    const other = byIndex.get(index);
    if (other === undefined || !masked(other)) out.push(line);
    else if (!other.comment) out.push(other.slot.text.replace(/[\r\n]+/g, ' '));
  });
  return out.join('\n');
}

function answered(message: unknown, pending: Set<JsonRpcId>): void {
  for (const m of Array.isArray(message) ? message : [message]) {
    if (!isRecord(m) || !('result' in m || 'error' in m)) continue;
    const id = idAsWritten(m);
    if (id !== undefined) pending.delete(id);
  }
}

/** The events that end a blocked stream: one JSON-RPC error per request still unanswered. */
function blockedAnswers(rejection: Rejection, guard: EventGuard): string {
  guard.blocked(rejection);
  const out = rpcErrorEvents(guard.pending, rejection.error);
  guard.pending.clear();
  return out;
}
