/**
 * zenova-control's settings, read from the environment once at start-up and validated with zod.
 * Every problem is reported (not just the first), each naming the variable and the rule; secret
 * values are never echoed back.
 */
import { z } from 'zod';
import { LOG_LEVELS, redactDatabaseUrl } from './logger.js';
import type { LogLevel } from './logger.js';

export interface ListenAddress { host: string; port: number }

export interface Settings {
  databaseUrl: string;
  listen: ListenAddress;
  adminToken: string;
  /** 32-byte key that encrypts secrets stored in PostgreSQL; optional until a feature needs it. */
  secretEncKey: Buffer | undefined;
  logLevel: LogLevel;
  /** Where operators and nodes reach the console/API, e.g. https://zenova.example.com. */
  publicUrl: string | undefined;
}

export class SettingsError extends Error {
  /** One line per problem, each starting with the variable name. */
  readonly problems: readonly string[];
  constructor(problems: readonly string[]) {
    super(problems.join('; '));
    this.name = 'SettingsError';
    this.problems = problems;
  }
}

export const DEFAULT_LISTEN = '127.0.0.1:7400';
const MIN_ADMIN_TOKEN_LENGTH = 32;
const SECRET_ENC_KEY_BYTES = 32;

/** The variables, for `--help`; the order is the order problems are reported in. */
export const settingsVariables = [
  { name: 'ZENOVA_DATABASE_URL', required: true, description: 'PostgreSQL URL, postgres://USER:PASSWORD@HOST:PORT/DB' },
  { name: 'ZENOVA_LISTEN', required: false, description: `HOST:PORT for the console/API (default ${DEFAULT_LISTEN}; port 0 picks a free port)` },
  { name: 'ZENOVA_ADMIN_TOKEN', required: true, description: `bearer token for the admin API /api/v1, at least ${MIN_ADMIN_TOKEN_LENGTH} characters` },
  { name: 'ZENOVA_SECRET_ENC_KEY', required: false, description: `${SECRET_ENC_KEY_BYTES} random bytes, base64 (openssl rand -base64 32); encrypts stored secrets` },
  { name: 'ZENOVA_LOG_LEVEL', required: false, description: `${LOG_LEVELS.join('|')} (default info)` },
  { name: 'ZENOVA_PUBLIC_URL', required: false, description: 'http(s) URL at which the console/API is reached' },
] as const;

type VariableName = (typeof settingsVariables)[number]['name'];

/** Quotes a user value in an error message, shortened so a pasted blob cannot flood the terminal. */
function quote(value: string): string {
  return `'${value.length > 80 ? `${value.slice(0, 77)}...` : value}'`;
}

// Empty counts as unset: env files and container specs often carry `NAME=` for "not configured".
const raw = z.preprocess((v) => (v === '' ? undefined : v), z.string().optional());

type Ctx = z.core.$RefinementCtx<string | undefined>;
function fail(ctx: Ctx, message: string): typeof z.NEVER {
  ctx.addIssue({ code: 'custom', message });
  return z.NEVER;
}

const databaseUrl = raw.transform((value, ctx) => {
  if (value === undefined) return fail(ctx, 'is required (postgres://USER:PASSWORD@HOST:PORT/DB)');
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return fail(ctx, `expected a postgres:// or postgresql:// URL, got ${quote(redactDatabaseUrl(value))}`);
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    return fail(ctx, `expected a postgres:// or postgresql:// URL, got scheme '${url.protocol}'`);
  }
  if (!url.hostname) return fail(ctx, `expected a host in the URL, got ${quote(redactDatabaseUrl(value))}`);
  return value;
});

/** HOST:PORT, with IPv6 hosts in brackets ([::1]:7400). */
export function parseListenAddress(value: string): ListenAddress | undefined {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^\s:[\]]+)):(\d{1,5})$/.exec(value);
  if (!match) return undefined;
  const port = Number(match[3]);
  const host = match[1] ?? match[2];
  if (host === undefined || port > 65535) return undefined;
  return { host, port };
}

const listen = raw.transform((value, ctx) => {
  const address = parseListenAddress(value ?? DEFAULT_LISTEN);
  if (!address) return fail(ctx, `expected HOST:PORT with a port from 0 to 65535, got ${quote(value ?? '')}`);
  return address;
});

const adminToken = raw.transform((value, ctx) => {
  if (value === undefined) return fail(ctx, `is required (at least ${MIN_ADMIN_TOKEN_LENGTH} characters, e.g. openssl rand -hex 32)`);
  // Never echo the value: report only what is wrong with it.
  if (value.length < MIN_ADMIN_TOKEN_LENGTH) {
    return fail(ctx, `expected at least ${MIN_ADMIN_TOKEN_LENGTH} characters, got ${value.length}`);
  }
  // It travels in an Authorization header, which only carries visible ASCII.
  if (!/^[\x21-\x7e]+$/.test(value)) return fail(ctx, 'expected visible ASCII characters only (no spaces or control characters)');
  return value;
});

const secretEncKey = raw.transform((value, ctx) => {
  if (value === undefined) return undefined;
  const rule = `expected ${SECRET_ENC_KEY_BYTES} bytes in base64 (openssl rand -base64 32)`;
  // Buffer.from(…, 'base64') silently skips junk, so check the alphabet first.
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(value)) return fail(ctx, `${rule}, got characters outside base64`);
  const key = Buffer.from(value, 'base64');
  if (key.length !== SECRET_ENC_KEY_BYTES) return fail(ctx, `${rule}, got ${key.length} bytes`);
  return key;
});

const logLevel = raw.transform((value, ctx): LogLevel => {
  if (value === undefined) return 'info';
  const level = LOG_LEVELS.find((l) => l === value.toLowerCase());
  if (!level) return fail(ctx, `expected one of ${LOG_LEVELS.join(', ')}, got ${quote(value)}`);
  return level;
});

const publicUrl = raw.transform((value, ctx) => {
  if (value === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return fail(ctx, `expected an http:// or https:// URL, got ${quote(value)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return fail(ctx, `expected an http:// or https:// URL, got scheme '${url.protocol}'`);
  }
  if (url.username || url.password) return fail(ctx, 'expected a URL without user name or password');
  return url.toString().replace(/\/$/, '');
});

const environmentSchema = z.object({
  ZENOVA_DATABASE_URL: databaseUrl,
  ZENOVA_LISTEN: listen,
  ZENOVA_ADMIN_TOKEN: adminToken,
  ZENOVA_SECRET_ENC_KEY: secretEncKey,
  ZENOVA_LOG_LEVEL: logLevel,
  ZENOVA_PUBLIC_URL: publicUrl,
} satisfies Record<VariableName, z.ZodType>);

export function loadSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const result = environmentSchema.safeParse(env);
  if (!result.success) {
    const problems = result.error.issues.map((issue) => `${issue.path.map(String).join('.')}: ${issue.message}`);
    throw new SettingsError(problems);
  }
  const v = result.data;
  return {
    databaseUrl: v.ZENOVA_DATABASE_URL,
    listen: v.ZENOVA_LISTEN,
    adminToken: v.ZENOVA_ADMIN_TOKEN,
    secretEncKey: v.ZENOVA_SECRET_ENC_KEY,
    logLevel: v.ZENOVA_LOG_LEVEL,
    publicUrl: v.ZENOVA_PUBLIC_URL,
  };
}
