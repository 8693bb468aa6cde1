/**
 * The keyset cursors of the billing lists (docs/api.md, "Billing"), in the records cursor's manner
 * (records/record-cursor.ts): a readable spelling of the last row's sort key, text in it as
 * base64url of its UTF-8 so a cursor's length is bounded, and read back only when it is exactly
 * what the encoder writes and names a position a row can have (else a 400, never a query).
 *
 * - Spend: `<by>.<from ms>.<to ms>.<spent micros>.<base64url of the group id, or ~ for none>`. The
 *   window rides along, so the next pages of a default window (ending "now") read the same window.
 * The lease list's cursor is the one every newest-first list shares: http/list-cursors.ts.
 */
import { codePointLength, isStorableText } from '../config/config-fields.js';
import type { SpendBy } from './billing-views.js';

export interface SpendCursor {
  by: SpendBy;
  fromMs: number;
  toMs: number;
  /** The last row's spend, exact (a sum may pass 2^53). */
  spentMicros: bigint;
  /** The last row's group id; null for the group of charges without one (no key, no node). */
  id: string | null;
}

/**
 * Ledger key and node ids come from records: 1..128 characters (proto/src/request-record.ts), as
 * zod counts them: code points, so up to 256 UTF-16 code units (emoji, say) and 512 bytes of UTF-8.
 */
const MAX_GROUP_ID_LENGTH = 128;
// Years 1..9999, as every query time (http/zod-schemas.ts): a cursor outside them is not one we issued.
const MIN_INSTANT_MS = Date.parse('0001-01-01T00:00:00Z');
const MAX_INSTANT_MS = Date.parse('9999-12-31T23:59:59.999Z');
const MAX_MICROS = 2n ** 63n - 1n;
const NO_ID = '~';

/** The longest spend cursor: a code point is at most 4 bytes of UTF-8, base64 spends 4 characters on 3 bytes. */
export const MAX_SPEND_CURSOR_LENGTH = 'account'.length + 2 * String(MIN_INSTANT_MS).length + String(MAX_MICROS).length
  + Math.ceil((MAX_GROUP_ID_LENGTH * 4 * 4) / 3) + 4;

export function encodeSpendCursor(c: SpendCursor): string {
  const id = c.id === null ? NO_ID : Buffer.from(c.id, 'utf8').toString('base64url');
  return `${c.by}.${c.fromMs}.${c.toMs}.${c.spentMicros}.${id}`;
}

/** undefined when the text is not a spend cursor this API issued. */
export function decodeSpendCursor(text: string): SpendCursor | undefined {
  const match = /^(account|key|node)\.(-?\d{1,15})\.(-?\d{1,15})\.(\d{1,19})\.(~|[A-Za-z0-9_-]+)$/.exec(text);
  if (match === null) return undefined;
  const [, by, from, to, spent, id] = match as unknown as [string, SpendBy, string, string, string, string];
  const cursor: SpendCursor = {
    by, // one of the three: the pattern says so
    fromMs: Number(from),
    toMs: Number(to),
    spentMicros: BigInt(spent),
    id: id === NO_ID ? null : Buffer.from(id, 'base64url').toString('utf8'),
  };
  // Only the encoder's own spelling: Node's decoders skip stray base64 and replace invalid UTF-8.
  if (encodeSpendCursor(cursor) !== text) return undefined;
  const inRange = (ms: number): boolean => ms >= MIN_INSTANT_MS && ms <= MAX_INSTANT_MS;
  // Spend may pass 2^53 but not PostgreSQL's bigint; an id holding NUL made the query a 500.
  const idOk = cursor.id === null || (cursor.id.length >= 1 && codePointLength(cursor.id) <= MAX_GROUP_ID_LENGTH && isStorableText(cursor.id));
  return inRange(cursor.fromMs) && inRange(cursor.toMs) && cursor.fromMs < cursor.toMs && cursor.spentMicros <= MAX_MICROS && idOk ? cursor : undefined;
}
