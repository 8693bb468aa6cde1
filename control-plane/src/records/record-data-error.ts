/**
 * Tells an ingestion failure caused by what a record holds from one caused by the database being
 * unavailable. The first fails the same way on every resend, so it must not fail the batch (the
 * node would resend it forever and nothing behind it would be delivered): the batch is ingested
 * record by record and the failing records set aside. The second must fail the session as before,
 * so the node keeps the batch and resends it once the database is back.
 */

/** SQLSTATE codes of class 23 that two ingestions racing on the same records can raise: not the record's fault, a resend succeeds. */
const CONFLICT_CODES = new Set(['23505', '23P01']);

function sqlState(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null || !('code' in err)) return undefined;
  const code = err.code;
  // A SQLSTATE is five characters; Node's own codes (ECONNRESET, …) are not.
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/**
 * True for errors a record's content causes: PostgreSQL's data exceptions (class 22: a value out
 * of range, bad input for a type) and integrity violations (class 23, but for unique and
 * exclusion conflicts), and the RangeError or TypeError raised while building a statement from
 * the record (a date JavaScript cannot represent).
 */
export function isRecordDataError(err: unknown): boolean {
  const code = sqlState(err);
  if (code !== undefined) return code.startsWith('22') || (code.startsWith('23') && !CONFLICT_CODES.has(code));
  return err instanceof RangeError || err instanceof TypeError;
}

/**
 * What to store as the reason a record was set aside: the SQLSTATE or the error's class, never its
 * message (PostgreSQL quotes the offending value in it, e.g. a date it could not parse).
 */
export function recordDataErrorDetail(err: unknown): string {
  const code = sqlState(err);
  const what = code !== undefined ? `SQLSTATE ${code}` : err instanceof Error ? err.name : 'an error';
  return `the control plane could not store this record (${what})`;
}
