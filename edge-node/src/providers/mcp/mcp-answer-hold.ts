/**
 * The durability hold of a POST's event stream (MCP streamable HTTP). A tool server answering a POST
 * with an event stream may send, before its answer, messages the client must act on at once: an
 * elicitation or sampling request it waits for the reply to, progress and log notifications. So
 * every complete event goes to the caller as soon as its blank line arrives; only the event that
 * completes the caller's request (the one answering the last still unanswered request id of the
 * POST) is held, with what follows it, until the request's record is durable: the runner
 * (deliverRaw) holds every chunk that follows an empty chunk, HOLD_FROM_HERE. Bytes go out as
 * received (events are cut at their blank lines, never re-serialised).
 *
 * The answer is complete with that event, and the tool server should close the stream then (MCP
 * spec): what it still sends is kept for at most AfterAnswer.graceMs and maxBytes (whole events),
 * then its stream is closed and the held part delivered, as chat-stream.ts does after `[DONE]`. A
 * tool server that keeps the stream open (notifications, keep-alives) thus never holds the caller's
 * answer, nor grows what the node holds, past those bounds.
 */
import { zenovaError } from '../../errors.js';
import { isRecord } from '../text-slot.js';
import { idAsWritten, parseRelayed } from './jsonrpc-message.js';
import type { JsonRpcId } from './jsonrpc-message.js';

/** Yielded before the completing event: the runner holds it, and all after it, until the record is committed. */
export const HOLD_FROM_HERE: Uint8Array = new Uint8Array(0);

/** What the stream may still send once the completing event came. */
export interface AfterAnswer {
  /** How long the tool server has to close the stream. */
  graceMs: number;
  /** How much of what it sends (whole events) is kept for the caller; past it the stream is closed. */
  maxBytes: number;
  /** Closes the tool server's stream, so a read waiting on it ends now (it may fail: nothing is lost). */
  close(): void;
}

const LF = 0x0a;
const CR = 0x0d;

/**
 * `source` cut into whole events, with HOLD_FROM_HERE before the event that answers the last of
 * `pending` (the POST's request ids; answered ones are removed). Only a partial event is buffered;
 * one longer than `maxEventBytes` fails the stream (ZN_ERR_UPSTREAM_ERROR), as for a guarded stream.
 * After the completing event, `after` bounds the rest. With no request id to answer (a POST of
 * notifications), nothing but the stream's end is held.
 */
export async function* holdCompletingEvent(
  source: AsyncIterable<Uint8Array>, pending: Set<JsonRpcId>, maxEventBytes: number, after: AfterAnswer,
): AsyncGenerator<Uint8Array> {
  const boundaries = new EventBoundaries();
  let partial: Uint8Array[] = [];
  let partialBytes = 0;
  // Set once the completing event is found (or when there is none to find): the rest passes as is.
  let found = pending.size === 0;
  // Set once the completing event was yielded: what follows it, bounded.
  let rest: Remainder | undefined;
  try {
    for await (const chunk of source) {
      if (rest !== undefined) {
        const events = rest.take(chunk, boundaries.scan(chunk), 0);
        if (events === undefined) break;
        if (events.length > 0) yield events;
        continue;
      }
      if (found) {
        yield chunk;
        continue;
      }
      // chunk[sent, from) holds whole events not yielded yet.
      let sent = 0;
      let from = 0;
      const ends = boundaries.scan(chunk);
      for (let i = 0; i < ends.length; i += 1) {
        const end = ends[i]!;
        const spanned = partial.length > 0;
        const event = spanned ? Buffer.concat([...partial, chunk.subarray(0, end)]) : chunk.subarray(from, end);
        partial = [];
        partialBytes = 0;
        if (completes(event, pending)) {
          // What came before goes now; the completing event and what follows are held.
          if (from > sent) yield chunk.subarray(sent, from);
          yield HOLD_FROM_HERE;
          yield event;
          found = true;
          rest = new Remainder(after);
          const events = rest.take(chunk, ends.slice(i + 1), end);
          if (events !== undefined && events.length > 0) yield events;
          break;
        }
        if (spanned) {
          yield event;
          sent = end;
        }
        from = end;
      }
      if (found) {
        if (rest?.full === true) break;
        continue;
      }
      // Whole events go at once; an unfinished one waits for its blank line.
      if (from > sent) yield chunk.subarray(sent, from);
      if (from < chunk.length) {
        partial.push(chunk.subarray(from));
        partialBytes += chunk.length - from;
        if (partialBytes > maxEventBytes) throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `The tool server sent an event longer than ${maxEventBytes} bytes.`);
      }
    }
  } catch (err) {
    // The answer is complete: a read failing after it (the grace's close among them) loses nothing.
    if (rest === undefined) throw err;
    rest.cut = true;
  } finally {
    rest?.stop();
  }
  if (rest !== undefined) {
    // Ended by the tool server: a last event without its blank line goes too; cut short, it does not.
    const last = rest.last();
    if (last !== undefined) yield last;
    return;
  }
  // A last event without its blank line (the client may still read it as the answer): held too.
  if (!found && partial.length > 0) {
    yield HOLD_FROM_HERE;
    yield Buffer.concat(partial);
  }
}

/** What follows the completing event: whole events kept up to a byte bound, for a grace period. */
class Remainder {
  private partial: Uint8Array[] = [];
  private partialBytes = 0;
  private kept = 0;
  private readonly timer: NodeJS.Timeout;
  /** Over the byte bound: nothing more is kept and the stream is to be closed. */
  full = false;
  /** The stream did not end by itself (failed, closed by the grace): an unfinished event is dropped. */
  cut = false;

  constructor(private readonly limits: AfterAnswer) {
    this.timer = setTimeout(() => limits.close(), limits.graceMs);
  }

  /** The whole events of chunk[start…] (given their ends in `ends`), or undefined once over the bound. */
  take(chunk: Uint8Array, ends: readonly number[], start: number): Uint8Array | undefined {
    const whole = ends.length === 0 ? start : ends[ends.length - 1]!;
    if (this.kept + this.partialBytes + (chunk.length - start) > this.limits.maxBytes) {
      this.full = true;
      this.cut = true;
      return undefined;
    }
    let events: Uint8Array = chunk.subarray(start, whole);
    if (whole > start && this.partial.length > 0) {
      events = Buffer.concat([...this.partial, events]);
      this.partial = [];
      this.partialBytes = 0;
    }
    this.kept += events.length;
    if (whole < chunk.length) {
      this.partial.push(chunk.subarray(whole));
      this.partialBytes += chunk.length - whole;
    }
    return events;
  }

  /** What is left of an unfinished last event, when the stream ended by itself. */
  last(): Uint8Array | undefined {
    if (this.cut || this.partial.length === 0) return undefined;
    return Buffer.concat(this.partial);
  }

  stop(): void {
    clearTimeout(this.timer);
  }
}

/** Where events end (just past each blank line), across chunks; SSE line ends are LF, CRLF or CR. */
export class EventBoundaries {
  private atLineStart = true;
  private afterCr = false;

  scan(chunk: Uint8Array): number[] {
    const ends: number[] = [];
    if (!this.afterCr && chunk.indexOf(CR) === -1) {
      // The usual stream (LF only): the engine's search instead of a loop over every byte.
      for (let lf = chunk.indexOf(LF); lf !== -1; lf = chunk.indexOf(LF, lf + 1)) {
        const blank = lf === 0 ? this.atLineStart : chunk[lf - 1] === LF;
        if (blank) ends.push(lf + 1);
      }
      if (chunk.length > 0) this.atLineStart = chunk[chunk.length - 1] === LF;
      return ends;
    }
    for (let i = 0; i < chunk.length; i += 1) {
      const byte = chunk[i];
      if (byte === LF && this.afterCr) {
        // The LF of a CRLF: part of the line end just counted.
        this.afterCr = false;
        if (ends.length > 0 && ends[ends.length - 1] === i) ends[ends.length - 1] = i + 1;
        continue;
      }
      this.afterCr = byte === CR;
      if (byte === LF || byte === CR) {
        if (this.atLineStart) ends.push(i + 1);
        this.atLineStart = true;
      } else {
        this.atLineStart = false;
      }
    }
    return ends;
  }
}

const RESULT = Buffer.from('"result"');
const ERROR = Buffer.from('"error"');

/** Whether `event` answers the last id of `pending` (the ids it answers are removed). */
function completes(event: Uint8Array, pending: Set<JsonRpcId>): boolean {
  const bytes = Buffer.from(event.buffer, event.byteOffset, event.byteLength);
  // Requests and notifications of the server (most events before the answer) are not parsed.
  if (!bytes.includes(RESULT) && !bytes.includes(ERROR)) return false;
  let data = '';
  let any = false;
  for (const line of bytes.toString('utf8').split(/\r\n|\r|\n/)) {
    if (line !== 'data' && !line.startsWith('data:')) continue;
    const value = line.slice(5);
    data += (any ? '\n' : '') + (value.startsWith(' ') ? value.slice(1) : value);
    any = true;
  }
  if (!any) return false;
  let message: unknown;
  try {
    // As written: an id past 2^53 is the request's, not the double JSON.parse rounds it to.
    message = parseRelayed(data).value;
  } catch {
    return false;
  }
  let answered = false;
  for (const m of Array.isArray(message) ? (message as unknown[]) : [message]) {
    if (!isRecord(m) || !('result' in m || 'error' in m)) continue;
    const id = idAsWritten(m);
    if (id !== undefined && pending.delete(id)) answered = true;
  }
  return answered && pending.size === 0;
}
