/**
 * The keyset cursors of the admin lists, in the records cursor's manner (records/record-cursor.ts):
 * read back only when exactly what the encoder writes and naming a position a row can have (else a
 * 400, never a query).
 *
 * - Newest first by (created_at, id) with UUID ids (API keys, credit leases):
 *   `<list>.<created_at in unix µs>.<id>`, `<list>` the list's path (`api-keys`, `leases`).
 *   created_at is kept to the microsecond, finer than a Date, so the cursor carries it as integer µs
 *   and the query compares created_at itself. Both lists' positions look alike, so the tag is what
 *   keeps one list's cursor from paging the other from an unrelated row.
 * - By name (accounts): base64url of the last name.
 *
 * The other lists' cursors (records: record-cursor.ts, spend: billing/billing-cursors.ts) have
 * shapes none of these can take: no cursor reads as a position of two lists.
 */
import { zenovaError } from '../errors.js';
import { CONFIG_NAME_PATTERN } from '../config/config-fields.js';

/** The 400's words for a cursor no list of this API issued (altered, from another list, naming no position). */
export const NOT_OUR_CURSOR = 'cursor: not a cursor this API returned';

/** The lists with a newest-first cursor: each one's path, which its cursors start with. */
export type NewestFirstList = 'api-keys' | 'leases';
const NEWEST_FIRST_LISTS: readonly NewestFirstList[] = ['api-keys', 'leases'];

export interface NewestFirstCursor {
  createdAtUs: bigint;
  id: string;
}

// Years 1..9999, as every query time (http/zod-schemas.ts): a cursor outside them is not one we issued.
const MIN_INSTANT_US = BigInt(Date.parse('0001-01-01T00:00:00Z')) * 1000n;
const END_INSTANT_US = (BigInt(Date.parse('9999-12-31T23:59:59.999Z')) + 1n) * 1000n;

const UNTAGGED_POSITION = /^(-?\d{1,18})\.([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;

/** The longest newest-first cursor of either list. */
export const MAX_NEWEST_FIRST_CURSOR_LENGTH = Math.max(...NEWEST_FIRST_LISTS.map((list) => list.length)) + 1
  + String(END_INSTANT_US).length + 1 + 36;

export function encodeNewestFirstCursor(list: NewestFirstList, c: NewestFirstCursor): string {
  return `${list}.${c.createdAtUs}.${c.id}`;
}

/** undefined when the text is not a cursor this API issued for `list`. */
function decodeNewestFirstCursor(list: NewestFirstList, text: string): NewestFirstCursor | undefined {
  return text.startsWith(`${list}.`) ? untaggedPosition(text.slice(list.length + 1)) : undefined;
}

/**
 * `list`'s position in `text`, else the 400, worded for the two mistakes a client can make with a
 * real cursor: sending it to another list, or keeping one from before the lists' cursors were
 * tagged (that one could be either list's, so it is not read; a cursor serves one walk through a
 * list, and the walk can start again).
 */
export function newestFirstCursorOf(list: NewestFirstList, text: string): NewestFirstCursor {
  const cursor = decodeNewestFirstCursor(list, text);
  if (cursor !== undefined) return cursor;
  const other = NEWEST_FIRST_LISTS.find((l) => l !== list && decodeNewestFirstCursor(l, text) !== undefined);
  if (other !== undefined) {
    throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', `cursor: from GET /api/v1/${other}, not this list; send a cursor only to the list that returned it`);
  }
  if (untaggedPosition(text) !== undefined) {
    throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', 'cursor: from before an upgrade of the control plane, no longer read; start again from the first page (leave out cursor)');
  }
  throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', NOT_OUR_CURSOR);
}

/** `<µs>.<uuid>` exactly as the encoder writes it and within years 1..9999, else undefined. */
function untaggedPosition(text: string): NewestFirstCursor | undefined {
  const match = UNTAGGED_POSITION.exec(text);
  if (match === null) return undefined;
  const cursor = { createdAtUs: BigInt(match[1]!), id: match[2]! };
  const inRange = cursor.createdAtUs >= MIN_INSTANT_US && cursor.createdAtUs < END_INSTANT_US;
  return `${cursor.createdAtUs}.${cursor.id}` === text && inRange ? cursor : undefined;
}

/** SQL: the row's created_at as integer µs since the epoch (text, for a bigint past 2^53). */
export const createdAtUsSql = (column: string): string => `(extract(epoch from ${column}) * 1000000)::bigint::text`;

/** SQL: rows after `cursor` in the (created_at desc, id desc) order, its two values pushed onto `values`. */
export function afterNewestFirstCursorSql(createdAt: string, id: string, cursor: NewestFirstCursor, values: unknown[]): string {
  const at = `$${values.push(cursor.createdAtUs.toString())}`;
  const after = `$${values.push(cursor.id)}`;
  return `(${createdAt}, ${id}) < (timestamptz 'epoch' + ${at}::bigint * interval '1 microsecond', ${after}::uuid)`;
}

/** The by-name cursor: the last row's name, base64url. */
export function encodeNameCursor(name: string): string {
  return Buffer.from(name, 'utf8').toString('base64url');
}

/** undefined when the text is not a by-name cursor this API issued (or names no possible name). */
export function decodeNameCursor(text: string): string | undefined {
  if (!/^[A-Za-z0-9_-]+$/.test(text)) return undefined;
  const name = Buffer.from(text, 'base64url').toString('utf8');
  return encodeNameCursor(name) === text && CONFIG_NAME_PATTERN.test(name) ? name : undefined;
}

/** A by-name cursor of a 128-character name. */
export const MAX_NAME_CURSOR_LENGTH = Math.ceil((128 * 4) / 3);
