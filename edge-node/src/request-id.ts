// x-request-id: echo a caller's well-formed id, otherwise mint one.
import { randomFillSync } from 'node:crypto';

export const REQUEST_ID_HEADER = 'x-request-id';

/** What a caller may send: header-safe, log-safe, bounded, no leading punctuation. */
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

/** The id for a request: the caller's header when it is a single well-formed value, else a new one. */
export function resolveRequestId(header: string | string[] | undefined): string {
  if (typeof header === 'string' && REQUEST_ID_PATTERN.test(header)) return header;
  return generateRequestId();
}
