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
const MAX_DEPTH = 4;

/** Builds pino redact paths: `key`, `*.key`, `*.*.key` … (pino has no "any depth" wildcard). */
export function redactPaths(keys: readonly string[] = SECRET_KEYS): string[] {
  const paths: string[] = [];
  for (const key of keys) {
    const plain = /^[A-Za-z_$][\w$]*$/.test(key);
    const top = plain ? key : `["${key}"]`;
    const nested = plain ? `.${key}` : `["${key}"]`;
    paths.push(top);
    for (let depth = 1; depth < MAX_DEPTH; depth++) paths.push(`${'*.'.repeat(depth).slice(0, -1)}${nested}`);
  }
  return paths;
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
      redact: { paths: redactPaths(), censor: CENSOR },
      // ISO timestamps read well in journald and sort as text.
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    opts.destination ?? pino.destination({ dest: 1, sync: true }),
  );
}
