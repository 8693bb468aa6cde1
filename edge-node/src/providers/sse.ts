/**
 * Server-sent events, both ways, for every provider: an upstream byte stream parsed into events
 * (`event:` and the joined `data:` lines; comments, `id:` and `retry:` are dropped), and one event
 * serialised for the caller. Only a partial event is ever buffered, bounded in size.
 */
import { zenovaError } from '../errors.js';
import type { SseEvent } from '../pipeline/context.js';
import { MAX_UPSTREAM_JSON_BYTES } from './upstream-call.js';

/**
 * One event may be as large as a JSON answer: the same answer streamed (an inline base64 image in
 * a delta) must not fail where it is delivered as JSON.
 */
export const MAX_SSE_EVENT_BYTES = MAX_UPSTREAM_JSON_BYTES;

/**
 * The longest an upstream may go without a data event once one came (parseSse): comments
 * (keep-alives) do not count, nor the time the consumer holds an event. `stop` is called when it
 * passes and must end the source with the error its read should fail with.
 */
export interface SseIdleDeadline {
  ms: number;
  stop: () => void;
}

/**
 * The events of `source`, in order. An unfinished last event (no blank line before the end) is
 * yielded only when it is evidently whole (isWholeEvent): a body cut inside an event is truncated,
 * as the SSE spec has it, so half an event never reaches a provider. Throws ZN_ERR_UPSTREAM_ERROR
 * when one event grows past `maxEventBytes` (counted in characters, never more than its bytes).
 * Each chunk is searched once and an unfinished event is kept as a list of pieces, joined when it
 * ends: an event of many megabytes in small chunks costs time in proportion to its size, where
 * searching a growing buffer again for every chunk cost its square. With `idle`, a source that
 * sends no data event for `idle.ms` after one came is stopped: undici's between-chunk timeout is
 * reset by any bytes, so an upstream sending only keep-alive comments would hold the call forever.
 * Bytes of an event still arriving (not comments) count as events do: a large event (an inline
 * image) that takes longer than `idle.ms` to arrive in steady pieces is progress, not silence.
 */
export async function* parseSse(source: AsyncIterable<Uint8Array | string>, maxEventBytes = MAX_SSE_EVENT_BYTES, idle?: SseIdleDeadline): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  const pending = new PendingEvent();
  const watch = idle === undefined ? undefined : new IdleWatch(idle);
  // CRLF and lone CR are legal line ends: a CR that ends a chunk waits for the next, which may start with its LF.
  let heldCr = false;
  // What the unfinished line held in `pending` is: whether bytes added to it are progress.
  let line: LineKind = 'start';
  try {
    for await (const chunk of source) {
      let text = typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
      if (heldCr) text = `\r${text}`;
      heldCr = text.endsWith('\r');
      if (heldCr) text = text.slice(0, -1);
      if (text.includes('\r')) text = text.replace(/\r\n?/g, '\n');
      let start = 0;
      // A blank line split across chunks: the event held ends with one line end, the chunk starts with the other.
      if (pending.endsWithLineEnd() && text.startsWith('\n')) {
        const event = parseEventBlock(pending.take().slice(0, -1));
        start = 1;
        line = 'start';
        if (event !== undefined) {
          watch?.hold();
          yield event;
          watch?.wait();
        }
      }
      let boundary: number;
      while ((boundary = text.indexOf('\n\n', start)) !== -1) {
        const event = parseEventBlock(pending.take(text.slice(start, boundary)));
        start = boundary + 2;
        line = 'start';
        if (event !== undefined) {
          watch?.hold();
          yield event;
          watch?.wait();
        }
      }
      const rest = start === 0 ? text : text.slice(start);
      if (watch !== undefined && rest !== '') {
        const kinds = addedLineKinds(rest, line);
        line = kinds.last;
        if (kinds.progress) watch.progress();
      }
      pending.add(rest);
      if (pending.length > maxEventBytes) {
        throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `The upstream sent an SSE event larger than ${maxEventBytes} bytes.`);
      }
    }
  } finally {
    watch?.clear();
  }
  // A held CR is a line end (no LF came); what the decoder still holds came after it.
  const tail = (heldCr ? '\n' : '') + decoder.decode();
  const rest = pending.take(tail.includes('\r') ? tail.replace(/\r\n?/g, '\n') : tail).replace(/\n+$/, '');
  if (rest !== '') {
    const event = parseEventBlock(rest);
    if (event !== undefined && isWholeEvent(event)) yield event;
  }
}

/**
 * The idle deadline of an upstream stream: past it, `body` is destroyed with ZN_ERR_UPSTREAM_TIMEOUT,
 * as undici's between-chunk timeout fails a silent one (and the connection is dropped with it).
 */
export function sseIdleDeadline(body: { destroy(error: Error): unknown }, upstream: string, ms: number): SseIdleDeadline {
  return { ms, stop: () => void body.destroy(zenovaError('ZN_ERR_UPSTREAM_TIMEOUT', `Upstream "${upstream}" sent no stream event for ${ms} ms.`)) };
}

/**
 * parseSse's idle deadline: one timer per stream, armed when the consumer first asks for the event
 * after one (before it, the attempt's timer bounds the wait) and re-armed in place (refresh, no
 * allocation) at each later ask. Firing while the consumer holds an event (a slow caller), it waits
 * again instead.
 */
class IdleWatch {
  private timer: NodeJS.Timeout | undefined;
  private held = false;

  constructor(private readonly idle: SseIdleDeadline) {}

  hold(): void {
    this.held = true;
  }

  wait(): void {
    this.held = false;
    if (this.timer === undefined) this.timer = setTimeout(() => this.fire(), this.idle.ms);
    else this.timer.refresh();
  }

  /** Part of an event arrived: the deadline starts again, once armed (before, the attempt's timer bounds the wait). */
  progress(): void {
    this.timer?.refresh();
  }

  clear(): void {
    clearTimeout(this.timer);
  }

  private fire(): void {
    if (this.held) this.timer?.refresh();
    else this.idle.stop();
  }
}

/** A line not begun yet, a comment (`:`…), or any other line (a field, e.g. `data:`). */
type LineKind = 'start' | 'comment' | 'field';

/**
 * Whether `text`, added to an unfinished event whose last line is of kind `line`, holds any byte of
 * a line that is not a comment (progress), and the kind of the line it leaves unfinished.
 */
function addedLineKinds(text: string, line: LineKind): { progress: boolean; last: LineKind } {
  let progress = false;
  let at = 0;
  while (at < text.length) {
    const end = text.indexOf('\n', at);
    const stop = end === -1 ? text.length : end;
    if (stop > at) {
      if (line === 'start') line = text.charCodeAt(at) === 58 /* ':' */ ? 'comment' : 'field';
      if (line === 'field') progress = true;
    }
    if (end === -1) break;
    line = 'start';
    at = end + 1;
  }
  return { progress, last: line };
}

/** The text of an event not ended yet, in the pieces it came in. */
class PendingEvent {
  private pieces: string[] = [];
  length = 0;

  add(text: string): void {
    if (text === '') return;
    this.pieces.push(text);
    this.length += text.length;
  }

  endsWithLineEnd(): boolean {
    return this.pieces.length > 0 && this.pieces[this.pieces.length - 1]!.endsWith('\n');
  }

  /** The whole text held, with `last` after it; the event is then empty again. */
  take(last = ''): string {
    if (this.pieces.length === 0) return last;
    const whole = this.pieces.length === 1 ? this.pieces[0]! + last : this.pieces.join('') + last;
    this.pieces = [];
    this.length = 0;
    return whole;
  }
}

/**
 * Whether an unfinished last event can be taken as sent: `[DONE]` (some upstreams end on it
 * without a blank line), an `event: error`, or a JSON object or array (cut inside, one does not parse; a number or
 * other text may be the start of a longer one).
 */
function isWholeEvent(event: SseEvent): boolean {
  // An error event is an error whatever its data (often plain text): never dropped as cut.
  if (event.data === '[DONE]' || event.event === 'error') return true;
  try {
    const value: unknown = JSON.parse(event.data);
    return typeof value === 'object' && value !== null;
  } catch {
    return false;
  }
}

/** One event's lines → the event; undefined when it carries no data (comments, keep-alives). */
export function parseEventBlock(block: string): SseEvent | undefined {
  let event: string | undefined;
  let data: string | undefined;
  let lineStart = 0;
  while (lineStart <= block.length) {
    let lineEnd = block.indexOf('\n', lineStart);
    if (lineEnd === -1) lineEnd = block.length;
    const line = block.slice(lineStart, lineEnd);
    lineStart = lineEnd + 1;
    if (line === '' || line.charCodeAt(0) === 58 /* ':' comment */) continue;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === 'data') data = data === undefined ? value : `${data}\n${value}`;
    else if (field === 'event') event = value;
  }
  if (data === undefined) return undefined;
  return event === undefined ? { data } : { event, data };
}

/** The event on the wire, blank line included. */
export function serialiseSse(event: SseEvent): string {
  const data = event.data.includes('\n') ? event.data.replace(/\n/g, '\ndata: ') : event.data;
  return event.event === undefined ? `data: ${data}\n\n` : `event: ${event.event}\ndata: ${data}\n\n`;
}
