/**
 * How long a request may take to arrive in full (headers and body) before Node's HTTP server gives
 * up on it: app.ts's clientErrorHandler answers it 408. Without a bound, headers followed by a body
 * that never ends held a connection and its request open forever. The bound covers only the
 * arrival: once the body is in, a long answer (a stream) is never cut by it.
 */

/** The slowest upload the node waits for: 32 KiB/s (about 256 kbit/s). */
const SLOWEST_UPLOAD_BYTES_PER_SECOND = 32 * 1024;
/** Never less, whatever the body limit. */
const MIN_REQUEST_TIMEOUT_MS = 120_000;

/** Long enough to upload a body of `maxBodyBytes` at the slowest upload waited for: 128 s for the default 4 MiB. */
export function requestTimeoutFor(maxBodyBytes: number): number {
  return Math.max(MIN_REQUEST_TIMEOUT_MS, Math.ceil(maxBodyBytes / SLOWEST_UPLOAD_BYTES_PER_SECOND) * 1000);
}

/** Node's own headers timeout (60 s), or the request timeout when that is shorter. */
const MAX_HEADERS_TIMEOUT_MS = 60_000;
/** Node's default and longest interval between looks for requests past their timeouts. */
const MAX_CHECK_INTERVAL_MS = 30_000;

/**
 * The options of Node's HTTP server that make `requestTimeoutMs` hold: a headers timeout no longer
 * than it (Node refuses that pairing in its constructor, and leaves a request with complete headers
 * untimed when the pairing is set afterwards), and looks for late requests often enough that a
 * short timeout (tests) fires near when it is due.
 */
export function httpServerTimeouts(requestTimeoutMs: number): { headersTimeout: number; connectionsCheckingInterval: number } {
  return {
    headersTimeout: Math.min(MAX_HEADERS_TIMEOUT_MS, requestTimeoutMs),
    connectionsCheckingInterval: Math.max(1, Math.min(MAX_CHECK_INTERVAL_MS, Math.floor(requestTimeoutMs / 4))),
  };
}
