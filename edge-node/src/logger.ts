// JSON logs for node-edge (pino), with secrets redacted wherever they sit in a logged object.
import { pino } from 'pino';
import type { DestinationStream, Logger, LevelWithSilent } from 'pino';

export type { Logger };

/** Property names whose values are never written to a log, at any of the first four levels. */
export const SECRET_KEYS = [
  'authorization',
  'proxy-authorization',
  'x-api-key',
  'cookie',
  'set-cookie',
  'apiKey',
  'api_key',
  'token',
  'accessToken',
  'refreshToken',
  'password',
  'secret',
  'credential',
] as const;

const CENSOR = '[redacted]';
/** Keys are checked in the logged object and in objects nested up to this many levels below it. */
const MAX_DEPTH = 4;
const SECRET_KEY_SET: ReadonlySet<string> = new Set(SECRET_KEYS);

/**
 * `value` with every SECRET_KEYS property (at the first MAX_DEPTH levels) replaced by the censor.
 * Copy-on-write: objects without secrets are returned as they are, so a line with nothing to hide
 * costs one walk and no allocation. Why not pino's `redact`: its wildcard paths made every line
 * cost ≈ 90 µs (measured with the request-finished line), the node's largest per-request cost.
 * An Error with a secret becomes a copy of the same class (pino's err serializer then names its
 * type as before); its `cause` is checked too.
 */
export function scrubSecrets<T>(value: T, level = 0): T {
  if (typeof value !== 'object' || value === null || level >= MAX_DEPTH || ArrayBuffer.isView(value)) return value;
  if (Array.isArray(value)) {
    const items = value as unknown[];
    let arrayCopy: unknown[] | undefined;
    for (let i = 0; i < items.length; i++) {
      const item = items[i];
      const scrubbed = scrubSecrets(item, level + 1);
      if (scrubbed !== item) (arrayCopy ??= items.slice())[i] = scrubbed;
    }
    return (arrayCopy ?? value) as T;
  }
  const record = value as Record<string, unknown>;
  let copy: Record<string, unknown> | undefined;
  const keys = value instanceof Error && 'cause' in value ? [...Object.keys(value), 'cause'] : Object.keys(value);
  for (const key of keys) {
    const item = record[key];
    const scrubbed = SECRET_KEY_SET.has(key) && item !== undefined ? CENSOR : scrubSecrets(item, level + 1);
    if (scrubbed !== item) (copy ??= value instanceof Error ? errorCopy(value) : { ...record })[key] = scrubbed;
  }
  return (copy ?? value) as T;
}

/** A copy of `err` with the same prototype and own properties (message and stack included). */
function errorCopy(err: Error): Record<string, unknown> {
  const copy = Object.create(Object.getPrototypeOf(err) as object) as Record<string, unknown>;
  for (const key of Object.getOwnPropertyNames(err)) Object.defineProperty(copy, key, Object.getOwnPropertyDescriptor(err, key)!);
  return copy;
}

export interface LoggerOptions {
  level?: LevelWithSilent;
  /** Where lines go; stdout when omitted. Tests pass a stream to read the lines back. */
  destination?: DestinationStream;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  return pino(
    {
      level: opts.level ?? 'info',
      base: { service: 'node-edge', pid: process.pid },
      formatters: {
        log: (object) => scrubSecrets(object),
        bindings: (bindings) => scrubSecrets(bindings),
      },
      // pino does not pass a child's bindings through formatters.bindings: a secret key bound on a
      // child (`logger.child({ token })`) is censored by these serializers (they see top-level keys
      // of bindings and lines; nested ones in lines are scrubbed above).
      serializers: Object.fromEntries(SECRET_KEYS.map((key) => [key, () => CENSOR])),
      // ISO timestamps read well in journald and sort as text.
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    // Synchronous: a line is written when logged, so a crash loses none. Measured against
    // sync: false (sonic-boom's thread-pool writes): no cheaper per request on the bench, and its
    // two extra thread wake-ups per line showed at light load.
    opts.destination ?? pino.destination({ dest: 1, sync: true }),
  );
}
