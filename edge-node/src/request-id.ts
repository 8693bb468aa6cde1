// x-request-id: the node mints every request's id; a caller's own id is kept beside it.
import { randomFillSync } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

export const REQUEST_ID_HEADER = 'x-request-id';
/** A caller's own id for a request, echoed back and recorded (OpenAI's name for it). */
export const CLIENT_REQUEST_ID_HEADER = 'x-client-request-id';

/** What a caller may send as its id: header-safe, log-safe, bounded, no leading punctuation. */
export const REQUEST_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

// Crockford base32: no I/L/O/U, so ids survive being read aloud or retyped from a screenshot.
const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

/**
 * `req_` + a 26-character ULID (48-bit millisecond time + 80 random bits, Crockford base32).
 * Why ULID-shaped: ids sort by time, so request records (time-partitioned later) and their
 * indexes stay local, and an operator can tell roughly when a call happened from its id;
 * 80 crypto-random bits per millisecond make collisions across a fleet negligible without
 * any coordination between nodes. The prefix marks ids this node minted.
 */
// Random bytes are drawn from the CSPRNG a few KiB at a time: one call per request was a
// measurable share of the node's per-request CPU.
const POOL_BYTES = 4096;
const pool = Buffer.alloc(POOL_BYTES);
let poolOffset = POOL_BYTES;

function randomSixteen(): number {
  if (poolOffset + 16 > POOL_BYTES) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const at = poolOffset;
  poolOffset += 16;
  return at;
}

export function generateRequestId(now: number = Date.now()): string {
  let time = '';
  let t = now;
  for (let i = 0; i < 10; i++) {
    time = CROCKFORD.charAt(t % 32) + time;
    t = Math.floor(t / 32);
  }
  const at = randomSixteen();
  let random = '';
  for (let i = at; i < at + 16; i++) random += CROCKFORD.charAt((pool[i] ?? 0) & 31);
  return `req_${time}${random}`;
}

/**
 * The caller's own id for a request: `x-client-request-id`, else `x-request-id` (what callers of a
 * proxy usually send), when it is one well-formed value. Never the request's id: that is the key of
 * the record and of its charge, so a caller repeating an id (an SDK retry, a fixed trace id, another
 * tenant's id) must not make two requests one.
 */
export function clientRequestIdOf(headers: IncomingHttpHeaders): string | undefined {
  const own = headers[CLIENT_REQUEST_ID_HEADER];
  if (typeof own === 'string' && REQUEST_ID_PATTERN.test(own)) return own;
  const proxied = headers[REQUEST_ID_HEADER];
  if (typeof proxied === 'string' && REQUEST_ID_PATTERN.test(proxied)) return proxied;
  return undefined;
}
