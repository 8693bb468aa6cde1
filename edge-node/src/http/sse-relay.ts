// Relays an upstream's chat completion SSE stream event by event: only a partial event is ever
// held, never the whole answer. Each `data:` JSON event gets the caller's alias back in `model`;
// usage is reported to the caller of the relay; when the caller did not ask for usage, the
// usage-only chunk the node forced on is dropped again (clients index choices[0]).
import { zenovaError } from '../errors.js';

export const MAX_SSE_EVENT_BYTES = 1024 * 1024;

export interface SseRelayOptions {
  /** The model name the caller used. */
  alias: string;
  /** Drop usage-only chunks and `usage: null` fields the caller did not ask for. */
  hideUsage: boolean;
  onUsage?: (usage: Record<string, unknown>) => void;
  maxEventBytes?: number;
}

/** Yields one string per upstream chunk that completed at least one event. */
export async function* relaySse(source: AsyncIterable<Uint8Array | string>, opts: SseRelayOptions): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  const maxEventBytes = opts.maxEventBytes ?? MAX_SSE_EVENT_BYTES;
  let buffer = '';
  for await (const chunk of source) {
    // CRLF is legal SSE; normalising the joined buffer also fixes a CR/LF split across chunks.
    buffer = (buffer + (typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true }))).replace(/\r\n/g, '\n');
    let out = '';
    let boundary: number;
    while ((boundary = buffer.indexOf('\n\n')) !== -1) {
      out += rewriteEvent(buffer.slice(0, boundary), opts);
      buffer = buffer.slice(boundary + 2);
    }
    if (buffer.length > maxEventBytes) {
      throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `The upstream sent an SSE event larger than ${maxEventBytes} bytes.`);
    }
    if (out !== '') yield out;
  }
  buffer += decoder.decode();
  if (buffer.trim() !== '') yield rewriteEvent(buffer.replace(/\n+$/, ''), opts);
}

/** One event (its lines, without the blank line) → the text to send, blank line included. */
export function rewriteEvent(event: string, opts: SseRelayOptions): string {
  const lines = event.split('\n');
  const dataLines = lines.filter((line) => line.startsWith('data:'));
  if (dataLines.length === 0) return `${event}\n\n`;
  const data = dataLines.map((line) => line.slice(line.startsWith('data: ') ? 6 : 5)).join('\n');
  if (data === '[DONE]') return `${event}\n\n`;
  let payload: unknown;
  try {
    payload = JSON.parse(data);
  } catch {
    return `${event}\n\n`;
  }
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) return `${event}\n\n`;
  const chunk = payload as Record<string, unknown>;
  if (typeof chunk.model === 'string') chunk.model = opts.alias;
  const usage = chunk.usage;
  if (typeof usage === 'object' && usage !== null) opts.onUsage?.(usage as Record<string, unknown>);
  if (opts.hideUsage) {
    if (usage !== undefined && usage !== null && Array.isArray(chunk.choices) && chunk.choices.length === 0) return '';
    if (usage === null) delete chunk.usage;
  }
  let wroteData = false;
  const rebuilt: string[] = [];
  for (const line of lines) {
    if (!line.startsWith('data:')) rebuilt.push(line);
    else if (!wroteData) {
      rebuilt.push(`data: ${JSON.stringify(chunk)}`);
      wroteData = true;
    }
  }
  return `${rebuilt.join('\n')}\n\n`;
}

/** The event that ends a stream the upstream broke off, so the caller sees why it ended. */
export function sseErrorEvent(body: unknown): string {
  return `event: error\ndata: ${JSON.stringify(body)}\n\n`;
}
