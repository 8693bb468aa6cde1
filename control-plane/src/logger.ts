/**
 * The control plane's pino JSON logger. Secrets never reach a log line: values under sensitive key
 * names are censored at any depth, request URLs and database URLs lose their passwords, and the
 * process's own known secrets (admin token, DB password, encryption key) are scrubbed from the final
 * line as a last line of defence — also from free-text messages — as are passwords in any URL.
 */
import pino from 'pino';
import { ambiguousDatabaseUrlReason } from './db/ambiguous-database-url.js';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface LoggerSettings {
  logLevel: LogLevel;
  /** Known secret values, scrubbed from every line whatever key or message carries them. */
  adminToken?: string | undefined;
  databaseUrl?: string | undefined;
  secretEncKey?: Buffer | undefined;
}

export const REDACTED = '[Redacted]';
const MAX_DEPTH = 12;
// Short values (a dev DB password like "postgres") would wreck unrelated text if scrubbed verbatim.
const MIN_SCRUB_LENGTH = 12;

// Matched against the key lower-cased with '-', '_', '.' and spaces removed.
const SENSITIVE_KEY_PARTS = ['password', 'passwd', 'secret', 'credential', 'privatekey', 'apikey', 'authorization', 'cookie'];

/**
 * True for key names whose values are secrets. "…token" counts, "…tokens" does not: token counts
 * (prompt_tokens, tokensPerMinute) are usage figures we want in logs.
 */
export function isSensitiveKey(key: string): boolean {
  const k = key.toLowerCase().replace(/[-_. ]/g, '');
  // An id names a thing (apiKeyId, credentialId): what an audit of the log needs, never a secret.
  if (k.endsWith('id') || k.endsWith('ids')) return false;
  return k.endsWith('token') || SENSITIVE_KEY_PARTS.some((part) => k.includes(part));
}

/** A URL with its password and any sensitive query parameters replaced by `***`. */
export function redactDatabaseUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    // Not a URL we can take apart: a password may be anywhere in it (after an '@', in a
    // `?password=` query, in a libpq `password=…` keyword string), so only the scheme survives.
    const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(raw)?.[0] ?? '';
    return `${scheme}${REDACTED}`;
  }
  // Its host, port and path may be pieces of the password (ambiguous-database-url.ts).
  if (ambiguousDatabaseUrlReason(url) !== undefined) return `${url.protocol}//${REDACTED}`;
  if (url.password) url.password = '***';
  for (const key of [...url.searchParams.keys()]) {
    if (isSensitiveKey(key)) url.searchParams.set(key, '***');
  }
  return url.toString();
}

// Query parameter names that carry a secret though no sensitive word is in them: `?key=` is where
// Google-style clients put an API key, `?sig=` a signed URL's signature. (Not sensitive as object
// keys in general: a log field named `key` is usually a config key.)
const SECRET_QUERY_NAMES = new Set(['key', 'sig', 'signature']);

/** Request path with the values of sensitive query parameters (e.g. ?token=, ?key=) censored. */
export function redactRequestUrl(url: string): string {
  const q = url.indexOf('?');
  if (q === -1) return url;
  const params = new URLSearchParams(url.slice(q + 1));
  let changed = false;
  for (const key of [...params.keys()]) {
    if (isSensitiveKey(key) || SECRET_QUERY_NAMES.has(key.toLowerCase().replace(/[-_. ]/g, ''))) {
      params.set(key, REDACTED);
      changed = true;
    }
  }
  return changed ? `${url.slice(0, q)}?${params.toString()}` : url;
}

// scheme://user:password@ anywhere in a text; the password part is what gets replaced. It runs to
// the last '@' of the word: a password written unencoded may hold '/', '?', '#' or '@' itself.
const URL_PASSWORD = /\b([a-z][a-z0-9+.-]*:\/\/[^\s/@:"]*:)[^\s"]+@/gi;

/** Every `scheme://user:password@` in `text` with the password replaced by `***`. */
export function redactUrlPasswords(text: string): string {
  return text.replace(URL_PASSWORD, '$1***@');
}

function isPlainObject(value: object): value is Record<string, unknown> {
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** A copy of `value` with secrets censored; untouched parts are shared, the input is never mutated. */
export function redactSecrets(value: unknown, depth = 0, seen = new WeakSet<object>()): unknown {
  if (typeof value === 'string') return value.includes('://') ? redactUrlPasswords(value) : value;
  if (value === null || typeof value !== 'object' || depth >= MAX_DEPTH || seen.has(value)) return value;
  seen.add(value);
  if (Array.isArray(value)) {
    const items = value as unknown[];
    let out: unknown[] | undefined;
    items.forEach((item, i) => {
      const redacted = redactSecrets(item, depth + 1, seen);
      if (redacted !== item) (out ??= [...items])[i] = redacted;
    });
    return out ?? value;
  }
  // Errors, Buffers, Dates, class instances: left to their serializers (which redact again).
  if (!isPlainObject(value)) return value;
  let out: Record<string, unknown> | undefined;
  for (const [key, item] of Object.entries(value)) {
    const redacted = isSensitiveKey(key) && item !== undefined && item !== null ? REDACTED : redactSecrets(item, depth + 1, seen);
    if (redacted !== item) (out ??= { ...value })[key] = redacted;
  }
  return out ?? value;
}

interface LoggableRequest {
  id?: unknown;
  method?: string;
  url?: string;
  host?: string;
  ip?: string;
  socket?: { remotePort?: number | undefined } | null;
}

/** Replaces fastify's request serializer: no headers at all, and a URL without query secrets. */
function serializeRequest(req: LoggableRequest): Record<string, unknown> {
  return {
    method: req.method,
    url: typeof req.url === 'string' ? redactRequestUrl(req.url) : undefined,
    host: req.host,
    remoteAddress: req.ip,
    remotePort: req.socket?.remotePort,
  };
}

function serializeError(err: Error): unknown {
  const serialized = pino.stdSerializers.err(err) as Record<string, unknown>;
  // Node's HTTP parser errors carry the request's raw bytes (tokens included) as a Buffer, which
  // the text scrub below cannot see once logged as a byte array.
  if ('rawPacket' in serialized) serialized.rawPacket = REDACTED;
  return redactSecrets(serialized);
}

function knownSecrets(settings: LoggerSettings): string[] {
  const values: string[] = [];
  if (settings.adminToken) values.push(settings.adminToken);
  if (settings.secretEncKey) values.push(settings.secretEncKey.toString('base64'));
  if (settings.databaseUrl) {
    try {
      const password = new URL(settings.databaseUrl).password;
      if (password) values.push(password, decodeURIComponent(password));
    } catch {
      // settings validation rejects such URLs; nothing to scrub
    }
  }
  const scrub = new Set<string>();
  for (const value of values) {
    if (value.length < MIN_SCRUB_LENGTH) continue;
    scrub.add(value);
    scrub.add(JSON.stringify(value).slice(1, -1)); // as it appears inside a JSON string
  }
  return [...scrub];
}

export function createLogger(settings: LoggerSettings, destination?: pino.DestinationStream): pino.Logger {
  const secrets = knownSecrets(settings);
  const options: pino.LoggerOptions = {
    level: settings.logLevel,
    name: 'zenova-control',
    timestamp: pino.stdTimeFunctions.isoTime,
    serializers: { req: serializeRequest, err: serializeError },
    formatters: {
      log: (obj) => redactSecrets(obj) as Record<string, unknown>,
      bindings: (bindings) => redactSecrets(bindings) as pino.Bindings,
    },
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', 'req.headers["x-api-key"]', 'res.headers["set-cookie"]'],
      censor: REDACTED,
    },
    hooks: {
      // The final line, message text included: URL passwords and our own secrets, wherever they are.
      streamWrite: (line) => secrets.reduce((out, secret) => out.replaceAll(secret, REDACTED), redactUrlPasswords(line)),
    },
  };
  // Synchronous stdout: the last lines before an exit (fatal start-up errors) are never lost.
  return pino(options, destination ?? pino.destination({ dest: 1, sync: true }));
}
