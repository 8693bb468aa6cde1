/**
 * Optimistic concurrency for the admin API's single objects (RFC 9110 §8.8.3, §13.1.1): an object's
 * `ETag` is a strong validator, a hash of its stored state as the API reads it, so it changes
 * whenever that state does; a `PUT`, `PATCH` or `DELETE` with `If-Match` writes only while the
 * object's current ETag is one it names (`*`: any existing object). The stores check it with the
 * object's row locked `FOR UPDATE`, in the transaction that writes it, so two writers holding the
 * same ETag cannot both win: the second reads what the first committed and is refused
 * (`412 ZN_ERR_CP_PRECONDITION_FAILED`, worded for a delete or an edit). Without `If-Match`
 * nothing is checked, as before.
 */
import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { zenovaError } from '../errors.js';

/** Longer is refused unread (400): the API's own ETags are 45 characters, a few fit. */
export const MAX_IF_MATCH_LENGTH = 200;

/** What the request guarded by If-Match does: its 412 advises editing again, or deleting again. */
export type IfMatchAction = 'edit' | 'delete';

/**
 * What a request's `If-Match` asks: any existing object (`*`), or one whose ETag is among `etags`;
 * `action` is what the request would do (a `DELETE` deletes, any other method edits).
 */
export type IfMatch = { readonly action: IfMatchAction } & (
  | { readonly any: true }
  | { readonly any: false; readonly etags: readonly string[] }
);

/** An entity-tag as RFC 9110 writes it: optionally weak, then a quoted string of etagc characters. */
const ENTITY_TAG = /^(W\/)?"[\x21\x23-\x7e\x80-\xff]*"$/;

const MALFORMED = `If-Match: must be "*" or a comma-separated list of quoted ETags as this API returns them ("…"), at most ${MAX_IF_MATCH_LENGTH} characters`;

/** The strong ETag of `state` (plain JSON: the same state always serialises the same). */
export function etagOf(state: unknown): string {
  return `"${createHash('sha256').update(JSON.stringify(state)).digest('base64url')}"`;
}

/**
 * The request's `If-Match`, or undefined when it has none; `method` (the request's) words a 412:
 * a `DELETE` is told nothing was deleted, anything else that nothing was written. Malformed or over
 * MAX_IF_MATCH_LENGTH: 400 ZN_ERR_CP_INVALID_REQUEST, before anything is read or written. A weak
 * tag (`W/"X"`) counts as `"X"`: a compressing reverse proxy (nginx's gzip) weakens the ETags it
 * passes on, and a client echoes what it got. Sound here, unlike for byte-range validators: every
 * ETag this API gives is a hash of the object's stored state, never of the bytes sent.
 */
export function readIfMatch(headers: IncomingHttpHeaders, method: string): IfMatch | undefined {
  const raw = headers['if-match'];
  if (raw === undefined) return undefined;
  const value = (Array.isArray(raw) ? raw.join(', ') : raw).trim();
  if (value.length > MAX_IF_MATCH_LENGTH) throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', MALFORMED);
  const action: IfMatchAction = method.toUpperCase() === 'DELETE' ? 'delete' : 'edit';
  if (value === '*') return { action, any: true };
  const tags = value.split(',').map((tag) => tag.trim()).filter((tag) => tag !== '');
  if (tags.length === 0 || !tags.every((tag) => ENTITY_TAG.test(tag))) throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', MALFORMED);
  return { action, any: false, etags: tags.map((tag) => (tag.startsWith('W/') ? tag.slice(2) : tag)) };
}

/**
 * Refuses the write (412) unless `ifMatch` is absent or names `currentEtag`; `currentEtag`
 * undefined: the object does not exist (a PUT that would create it), which no If-Match matches.
 * The refusal is worded for `ifMatch.action`: a delete is told nothing was deleted, an edit that
 * nothing was written.
 * Call it with the object's row locked until the write commits.
 */
export function checkIfMatch(ifMatch: IfMatch | undefined, currentEtag: string | undefined): void {
  if (ifMatch === undefined) return;
  if (currentEtag !== undefined && (ifMatch.any || ifMatch.etags.includes(currentEtag))) return;
  throw zenovaError('ZN_ERR_CP_PRECONDITION_FAILED', preconditionFailedMessage(currentEtag !== undefined, ifMatch.action));
}

function preconditionFailedMessage(exists: boolean, action: IfMatchAction): string {
  if (action === 'delete') {
    return exists
      ? 'If-Match: the object changed since it was read (its ETag is no longer the one sent); nothing was deleted. Re-read it (GET) and, if it should still go, send the delete again with its new ETag.'
      : 'If-Match: the object does not exist (it was deleted since it was read, or never existed); nothing was deleted.';
  }
  return exists
    ? 'If-Match: the object changed since it was read (its ETag is no longer the one sent); nothing was written. Re-read it (GET) and apply the edit again with its new ETag.'
    : 'If-Match: the object does not exist (it was deleted since it was read, or never existed); nothing was written. Re-read it and apply the edit again.';
}
