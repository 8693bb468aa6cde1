/**
 * The durability hold of a POST's event stream (MCP streamable HTTP). A tool server answering a POST
 * with an event stream may send, before its answer, messages the client must act on at once: an
 * elicitation or sampling request it waits for the reply to, progress and log notifications. So
 * every complete event goes to the caller as soon as its blank line arrives; only the event that
 * completes the caller's request (the one answering the last still unanswered request id of the
 * POST) is held, with everything after it, until the request's record is durable: the runner
 * (deliverRaw) holds every chunk that follows an empty chunk, HOLD_FROM_HERE. Bytes go out as
 * received (events are cut at their blank lines, never re-serialised).
 */
import { zenovaError } from '../../errors.js';
import { isRecord } from '../text-slot.js';

/** Yielded before the completing event: the runner holds it, and all after it, until the record is committed. */
export const HOLD_FROM_HERE: Uint8Array = new Uint8Array(0);

const LF = 0x0a;
const CR = 0x0d;

/**
 * `source` cut into whole events, with HOLD_FROM_HERE before the event that answers the last of
 * `pending` (the POST's request ids; answered ones are removed). Only a partial event is buffered;
 * one longer than `maxEventBytes` fails the stream (ZN_ERR_UPSTREAM_ERROR), as for a guarded stream.
 * With no request id to answer (a POST of notifications), nothing but the stream's end is held.
 */
export async function* holdCompletingEvent(source: AsyncIterable<Uint8Array>, pending: Set<string | number>, maxEventBytes: number): AsyncGenerator<Uint8Array> {
  const boundaries = new EventBoundaries();
  let partial: Uint8Array[] = [];
  let partialBytes = 0;
  // Set once the completing event is found (or when there is none to find): the rest passes as is.
  let found = pending.size === 0;
  for await (const chunk of source) {
    if (found) {
      yield chunk;
      continue;
    }
    // chunk[sent, from) holds whole events not yielded yet.
    let sent = 0;
    let from = 0;
    for (const end of boundaries.scan(chunk)) {
      const spanned = partial.length > 0;
      const event = spanned ? Buffer.concat([...partial, chunk.subarray(0, end)]) : chunk.subarray(from, end);
      partial = [];
      partialBytes = 0;
      if (completes(event, pending)) {
        // What came before goes now; the completing event and the rest of the stream are held.
        if (from > sent) yield chunk.subarray(sent, from);
        yield HOLD_FROM_HERE;
        yield spanned ? Buffer.concat([event, chunk.subarray(end)]) : chunk.subarray(from);
        found = true;
        break;
      }
      if (spanned) {
        yield event;
        sent = end;
      }
      from = end;
    }
    if (found) continue;
    // Whole events go at once; an unfinished one waits for its blank line.
    if (from > sent) yield chunk.subarray(sent, from);
    if (from < chunk.length) {
      partial.push(chunk.subarray(from));
      partialBytes += chunk.length - from;
      if (partialBytes > maxEventBytes) throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `The tool server sent an event longer than ${maxEventBytes} bytes.`);
    }
  }
  // A last event without its blank line (the client may still read it as the answer): held too.
  if (!found && partial.length > 0) {
    yield HOLD_FROM_HERE;
    yield Buffer.concat(partial);
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
function completes(event: Uint8Array, pending: Set<string | number>): boolean {
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
    message = JSON.parse(data);
  } catch {
    return false;
  }
  let answered = false;
  for (const m of Array.isArray(message) ? (message as unknown[]) : [message]) {
    if (isRecord(m) && (typeof m.id === 'string' || typeof m.id === 'number') && ('result' in m || 'error' in m) && pending.delete(m.id)) answered = true;
  }
  return answered && pending.size === 0;
}
