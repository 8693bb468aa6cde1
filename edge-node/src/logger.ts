// JSON logs for node-edge (pino), with secrets redacted wherever they sit in a logged object.
import { pino } from 'pino';
import type { DestinationStream, Logger, LevelWithSilent } from 'pino';
import { BatchedLogWriter } from './batched-log-writer.js';

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
  /**
   * Gather lines to stdout and write them together (the serving daemon): at most BATCH_CHARS or
   * BATCH_MS after the first line, at once for warn and above, and on exit. One write per request
   * line was a system call (and, under systemd, a wake-up of journald) per request.
   */
  batched?: boolean;
}

/** A batched stdout is written when this many characters are waiting ... */
const BATCH_CHARS = 8192;
/** ... and at least this often, so `journalctl -f` stays live; a kill -9 loses at most this much. */
const BATCH_MS = 100;

/** Stdout for the serving daemon: batched, flushed by every warning or error and on exit. */
function batchedStdout(): BatchedLogWriter {
  const writer = new BatchedLogWriter(1, BATCH_CHARS, BATCH_MS);
  process.once('exit', () => writer.flush());
  return writer;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const batched = opts.destination === undefined && opts.batched === true ? batchedStdout() : undefined;
  return pino(
    {
      level: opts.level ?? 'info',
      ...(batched !== undefined
        ? {
            hooks: {
              logMethod(args: Parameters<pino.LogFn>, method: pino.LogFn, level: number): void {
                method.apply(this, args);
                // Warnings and errors go out at once, with everything logged before them.
                if (level >= pino.levels.values.warn!) batched.flush();
              },
            },
          }
        : {}),
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
    // Synchronous writes (batched or not): a line written is on its way. Measured against
    // sync: false (sonic-boom's thread-pool writes): no cheaper per request on the bench, and its
    // two extra thread wake-ups per line showed at light load.
    opts.destination ?? batched ?? pino.destination({ dest: 1, sync: true }),
  );
}
