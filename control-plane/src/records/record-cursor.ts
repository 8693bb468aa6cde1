/**
 * The records list's keyset cursor: the last row's (received_at in unix ms, request id), written
 * `<ms>.<base64url of the id's UTF-8>`. Encoding the id's bytes bounds a cursor's length by
 * construction, so every cursor the API issues fits the route's cap (MAX_CURSOR_LENGTH). Ids
 * escaped as JSON could grow past it, and paging stopped at such a record.
 */
import { MAX_RECORD_UNIX_MS } from '../../../proto/src/index.js';
import { codePointLength, isStorableText } from '../config/config-fields.js';

export interface RecordCursor {
  receivedAtMs: number;
  requestId: string;
}

/**
 * A record's request id is 1..128 characters (proto/src/request-record.ts) as zod and the database's
 * check count them: code points, so up to 256 UTF-16 code units (emoji, say).
 */
const MAX_REQUEST_ID_LENGTH = 128;

/**
 * The longest cursor encodeCursor can give: a code point is at most 4 bytes of UTF-8, and base64
 * spends 4 characters on 3 bytes. (Bounded by 3 bytes per UTF-16 unit, it was too short for an id of
 * 128 emoji: the cursor issued after such a record was refused, and paging stopped there.)
 */
export const MAX_CURSOR_LENGTH = String(MAX_RECORD_UNIX_MS).length + 1 + Math.ceil((MAX_REQUEST_ID_LENGTH * 4 * 4) / 3);

export function encodeCursor(cursor: RecordCursor): string {
  return `${cursor.receivedAtMs}.${Buffer.from(cursor.requestId, 'utf8').toString('base64url')}`;
}

/** undefined when the text is not a cursor this API issued (a 400, never a query). */
export function decodeCursor(text: string): RecordCursor | undefined {
  const cursor = text.includes('.') ? parseCursor(text) : parseJsonCursor(text);
  return cursor !== undefined && isRecordPosition(cursor) ? cursor : undefined;
}

function parseCursor(text: string): RecordCursor | undefined {
  const match = /^(\d{1,15})\.([A-Za-z0-9_-]+)$/.exec(text);
  if (match === null) return undefined;
  const cursor = { receivedAtMs: Number(match[1]), requestId: Buffer.from(match[2]!, 'base64url').toString('utf8') };
  // Only encodeCursor's own spelling: Node's decoders skip stray base64 and replace invalid UTF-8.
  return encodeCursor(cursor) === text ? cursor : undefined;
}

// Cursors issued before the id was encoded as bytes (base64url of JSON `[ms, id]`) still read, so
// paging carries on across an upgrade.
function parseJsonCursor(text: string): RecordCursor | undefined {
  try {
    const value = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as unknown;
    if (!Array.isArray(value) || value.length !== 2) return undefined;
    const [ms, id] = value as [unknown, unknown];
    return typeof ms === 'number' && typeof id === 'string' ? { receivedAtMs: ms, requestId: id } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether a record could sit there: its time within the record schema's range and its id one
 * PostgreSQL can compare (a NUL in it made the list query fail as a 500).
 */
function isRecordPosition({ receivedAtMs, requestId }: RecordCursor): boolean {
  return Number.isSafeInteger(receivedAtMs) && receivedAtMs >= 0 && receivedAtMs <= MAX_RECORD_UNIX_MS
    && requestId.length >= 1 && codePointLength(requestId) <= MAX_REQUEST_ID_LENGTH && isStorableText(requestId);
}
