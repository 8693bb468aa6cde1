/**
 * Tells "the database is unreachable or going away" apart from every other database error: the
 * first is a retryable 503 for clients, the second a bug or bad data (500).
 */

// Node socket errors seen while connecting to or talking with the server.
const NETWORK_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE',
]);

// SQLSTATEs: class 08 (connection exception) plus server shutdown / start-up / overload states.
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300', '57014']);

// node-postgres reports these conditions with plain Errors and no code.
const PG_CLIENT_MESSAGES = [
  'Connection terminated',
  'timeout exceeded when trying to connect',
  'Cannot use a pool after calling end on the pool',
  'Client has encountered a connection error and is not queryable',
  'Client was closed and is not queryable',
  'Query read timeout',
];

export function isDatabaseUnavailable(err: unknown, depth = 0): boolean {
  if (!(err instanceof Error) || depth > 3) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (NETWORK_CODES.has(code) || code.startsWith('08') || UNAVAILABLE_SQLSTATES.has(code)) return true;
    // 55000 (object not in prerequisite state) is general: only "database … is not currently
    // accepting connections" (ALLOW_CONNECTIONS false, a database being dropped or renamed) is an outage.
    if (code === '55000' && /is not currently accepting connections/.test(err.message)) return true;
  }
  if (PG_CLIENT_MESSAGES.some((m) => err.message.startsWith(m))) return true;
  // Node's happy-eyeballs connect reports every failed address inside an AggregateError.
  if (err instanceof AggregateError && err.errors.some((e) => isDatabaseUnavailable(e, depth + 1))) return true;
  return err.cause !== undefined && isDatabaseUnavailable(err.cause, depth + 1);
}
