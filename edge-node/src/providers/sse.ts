/**
 * Server-sent events, both ways, for every provider: an upstream byte stream parsed into events
 * (`event:` and the joined `data:` lines; comments, `id:` and `retry:` are dropped), and one event
 * serialised for the caller. Only a partial event is ever buffered, bounded in size.
 */
import { zenovaError } from '../errors.js';
import type { SseEvent } from '../pipeline/context.js';

export const MAX_SSE_EVENT_BYTES = 1024 * 1024;

/**
 * The events of `source`, in order. An unfinished last event (no blank line before the end) is
 * yielded only when it is evidently whole (isWholeEvent): a body cut inside an event is truncated,
 * as the SSE spec has it, so half an event never reaches a provider. Throws ZN_ERR_UPSTREAM_ERROR
 * when one event grows past `maxEventBytes`.
 */
export async function* parseSse(source: AsyncIterable<Uint8Array | string>, maxEventBytes = MAX_SSE_EVENT_BYTES): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of source) {
    buffer += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
    // CRLF and lone CR are legal line ends; normalising the joined buffer also fixes a pair split across chunks
    // (a CR at the very end waits for the next chunk, which may start with its LF).
    if (buffer.includes('\r')) buffer = normaliseLineEnds(buffer);
    let start = 0;
    let boundary: number;
    while ((boundary = buffer.indexOf('\n\n', start)) !== -1) {
      const event = parseEventBlock(buffer.slice(start, boundary));
      start = boundary + 2;
      if (event !== undefined) yield event;
    }
    if (start > 0) buffer = buffer.slice(start);
    if (buffer.length > maxEventBytes) {
      throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `The upstream sent an SSE event larger than ${maxEventBytes} bytes.`);
    }
  }
  buffer += decoder.decode();
  if (buffer.includes('\r')) buffer = buffer.replace(/\r\n?/g, '\n');
  const rest = buffer.replace(/\n+$/, '');
  if (rest !== '') {
    const event = parseEventBlock(rest);
    if (event !== undefined && isWholeEvent(event)) yield event;
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

function normaliseLineEnds(buffer: string): string {
  const keepCr = buffer.endsWith('\r');
  const body = (keepCr ? buffer.slice(0, -1) : buffer).replace(/\r\n?/g, '\n');
  return keepCr ? `${body}\r` : body;
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
