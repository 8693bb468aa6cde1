/**
 * zenova-control's settings, read from the environment once at start-up and validated with zod.
 * Every problem is reported (not just the first), each naming the variable and the rule; secret
 * values are never echoed back.
 */
import { isIP } from 'node:net';
import path from 'node:path';
import { z } from 'zod';
import { DEFAULT_LEASE_POLICY } from './billing/lease-policy.js';
import type { LeaseSettings } from './billing/lease-policy.js';
import { ambiguousDatabaseUrlReason, PERCENT_ENCODE_ADVICE } from './db/ambiguous-database-url.js';
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
  /** Certificate and key for the console/API; when set it listens HTTPS, otherwise plain HTTP. */
  tls?: { certFile: string; keyFile: string } | undefined;
  /**
   * Reverse proxies in front of the console/API whose X-Forwarded-For is believed (addresses,
   * CIDRs, or loopback / linklocal / uniquelocal); empty: none, the peer's address is the client's.
   */
  trustedProxies: readonly string[];
  gateway: GatewaySettings;
  nodes: NodeSettings;
  /** How big nodes' credit leases are and how often they are reconsidered (docs/billing.md). */
  leases: LeaseSettings;
  faults: FaultSettings;
}

/** The node gateway (gRPC over TLS) and its server identity. */
export interface GatewaySettings {
  listen: ListenAddress;
  /** DNS names and IP addresses nodes use to reach the gateway; the generated certificate covers all. */
  hosts: string[];
  /** host:port nodes dial; when unset, the first host and the bound port. */
  publicAddress?: string | undefined;
  /** Local cache of the generated identity (ca.crt, tls.crt, tls.key). */
  tlsDir: string;
  /** Generate an identity on first start; false in external-certificate mode. */
  autoGenerate: boolean;
  /** External mode: a certificate and key issued elsewhere, used as they are. */
  certFile?: string | undefined;
  keyFile?: string | undefined;
  /** External mode: the public CA handed to nodes; unset means nodes use their system store. */
  trustBundleFile?: string | undefined;
}

export interface NodeSettings {
  /** A node is offline this long after its last heartbeat. */
  offlineAfterMs: number;
  credentialValidityMs: number;
  /** A credential older than this is rotated over the live stream. */
  credentialRotateAfterMs: number;
  /** How long a superseded credential keeps working, so a lost rotation reply never locks a node out. */
  credentialHandoverMs: number;
  heartbeatIntervalMs: number;
  installTokenTtlMs: number;
  /** Enrollment attempts allowed per client IP per minute. */
  enrollAttemptsPerMinute: number;
}

/** Fault injection for tests only; every value defaults to "off". */
export interface FaultSettings {
  /** Issue the rotated credential but drop the next N rotation replies (the stream is closed instead). */
  dropRotationReplies: number;
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
export const DEFAULT_GATEWAY_LISTEN = '0.0.0.0:8443';
export const DEFAULT_GATEWAY_HOSTS = ['localhost', '127.0.0.1'] as const;
export const DEFAULT_GATEWAY_TLS_DIR = '.zenova-data/gateway-tls';
const DAY_SECONDS = 86_400;
// Ceiling for every duration: ten years, far beyond anything sensible, but keeps numbers finite.
const MAX_DURATION_SECONDS = 10 * 365 * DAY_SECONDS;
const MIN_ADMIN_TOKEN_LENGTH = 32;
/** The most the console's login form takes (console-session.routes.ts). */
export const MAX_ADMIN_TOKEN_LENGTH = 512;
const MAX_LEASE_CAP_MICROS = 999_999_999_999_999; // 15 digits: a lease cap far beyond any balance
const MAX_LEASE_REFRESH_MS = 999_999_999;
// A node caps the interval it is asked for at 10 minutes (edge-node/src/control/session.ts).
const NODE_MAX_HEARTBEAT_INTERVAL_MS = 10 * 60_000;
const DEFAULT_HEARTBEAT_INTERVAL_MS = 5000;
const HEARTBEAT_INTERVAL_UNSET = -1;
const SECRET_ENC_KEY_BYTES = 32;

/** The variables, for `--help`; the order is the order problems are reported in. */
export const settingsVariables = [
  { name: 'ZENOVA_DATABASE_URL', required: true, description: 'PostgreSQL URL, postgres://USER:PASSWORD@HOST:PORT/DB, with USER and PASSWORD percent-encoded (encodeURIComponent: / ? # @ : % as %2F %3F %23 %40 %3A %25)' },
  { name: 'ZENOVA_LISTEN', required: false, description: `HOST:PORT for the console/API (default ${DEFAULT_LISTEN}; port 0 picks a free port)` },
  { name: 'ZENOVA_ADMIN_TOKEN', required: true, description: `bearer token for the admin API /api/v1, ${MIN_ADMIN_TOKEN_LENGTH} to ${MAX_ADMIN_TOKEN_LENGTH} visible ASCII characters` },
  { name: 'ZENOVA_SECRET_ENC_KEY', required: true, description: `${SECRET_ENC_KEY_BYTES} random bytes, base64 (openssl rand -base64 32); encrypts the keys stored in PostgreSQL, the same on every replica (back it up with the database)` },
  { name: 'ZENOVA_LOG_LEVEL', required: false, description: `${LOG_LEVELS.join('|')} (default info)` },
  { name: 'ZENOVA_PUBLIC_URL', required: false, description: 'http(s) URL nodes and browsers use to reach the console/API, e.g. behind a reverse proxy (https://zenova.example.com); an https one is the Add Node wizard\'s default control-plane URL (nodes enroll over HTTPS only); the start-up log names it' },
  { name: 'ZENOVA_TLS_CERT_FILE', required: false, description: 'PEM certificate (chain) for the console/API; with ZENOVA_TLS_KEY_FILE it serves HTTPS, without both plain HTTP' },
  { name: 'ZENOVA_TLS_KEY_FILE', required: false, description: 'PEM private key for ZENOVA_TLS_CERT_FILE' },
  { name: 'ZENOVA_TRUSTED_PROXIES', required: false, description: 'comma list of the reverse proxies in front of the console/API whose X-Forwarded-For names the client (IP addresses, CIDRs such as 10.0.0.0/8, or loopback, linklocal, uniquelocal); default none. Per-client limits (enrollment attempts) and logs then see each client, not the proxy' },
  { name: 'ZENOVA_GATEWAY_LISTEN', required: false, description: `HOST:PORT for the node gateway, gRPC over TLS (default ${DEFAULT_GATEWAY_LISTEN}; port 0 picks a free port)` },
  { name: 'ZENOVA_GATEWAY_HOSTS', required: false, description: `comma list of DNS names/IPs nodes use to reach the gateway, put in the certificate; the first is the one nodes dial (default ${DEFAULT_GATEWAY_HOSTS.join(',')}: only a node on this host; start-up warns). ` +
    'Set it before the first start: a generated certificate is never reissued, so covering another host later means replacing the identity (delete from gateway_tls_identity, remove ZENOVA_GATEWAY_TLS_DIR) and re-enrolling every node' },
  { name: 'ZENOVA_GATEWAY_PUBLIC_ADDRESS', required: false, description: 'HOST:PORT nodes dial, HOST one of ZENOVA_GATEWAY_HOSTS (default: the first host and the bound port)' },
  { name: 'ZENOVA_GATEWAY_TLS_DIR', required: false, description: `private local cache of the gateway TLS identity (default <cwd>/${DEFAULT_GATEWAY_TLS_DIR})` },
  { name: 'ZENOVA_GATEWAY_TLS_AUTO_GENERATE', required: false, description: 'true|false: generate the gateway identity on first start (default true; false with ZENOVA_GATEWAY_CERT_FILE)' },
  { name: 'ZENOVA_GATEWAY_CERT_FILE', required: false, description: 'external mode: PEM server certificate for the gateway (needs ZENOVA_GATEWAY_KEY_FILE); turns auto-generation off' },
  { name: 'ZENOVA_GATEWAY_KEY_FILE', required: false, description: 'external mode: PEM private key for ZENOVA_GATEWAY_CERT_FILE' },
  { name: 'ZENOVA_GATEWAY_TRUST_BUNDLE', required: false, description: 'external mode: public CA PEM handed to nodes, who then trust only it (unset: the enrollment answer pins no CA, caPem "", and nodes verify the gateway against their system trust store)' },
  { name: 'ZENOVA_NODE_OFFLINE_AFTER_SECONDS', required: false, description: 'a node is offline this long after its last heartbeat (default 120)' },
  { name: 'ZENOVA_CREDENTIAL_VALIDITY_SECONDS', required: false, description: `lifetime of a node credential, and of its credit leases after their last grant (default ${30 * DAY_SECONDS}, 30 days)` },
  { name: 'ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS', required: false, description: `rotate a node credential once it is this old, at most half of ZENOVA_CREDENTIAL_VALIDITY_SECONDS (default ${DAY_SECONDS}, or half the validity when that is shorter)` },
  { name: 'ZENOVA_CREDENTIAL_HANDOVER_SECONDS', required: false, description: 'a superseded credential keeps working this long after its node acknowledged (or first used) the new one (default 3600)' },
  { name: 'ZENOVA_HEARTBEAT_INTERVAL_MS', required: false, description: `heartbeat interval asked of nodes, from 100 to 3600000 and at most half of ZENOVA_NODE_OFFLINE_AFTER_SECONDS (default ${DEFAULT_HEARTBEAT_INTERVAL_MS}, or half the offline timeout when that is shorter); a node heartbeats at least every ${NODE_MAX_HEARTBEAT_INTERVAL_MS / 60_000} min whatever it is asked` },
  { name: 'ZENOVA_INSTALL_TOKEN_TTL_SECONDS', required: false, description: `lifetime of install tokens (default ${DAY_SECONDS}, 24 h)` },
  { name: 'ZENOVA_ENROLL_ATTEMPTS_PER_MINUTE', required: false, description: 'enrollment attempts allowed per client IP per minute (default 10)' },
  { name: 'ZENOVA_LEASE_CAP_MICROS', required: false, description: `most a node's credit lease of one account holds for new reservations, micro-units from 1 to ${MAX_LEASE_CAP_MICROS} (default ${DEFAULT_LEASE_POLICY.capMicros}, 100 units)` },
  { name: 'ZENOVA_LEASE_SHARE', required: false, description: `share of an account's free balance one lease may take, a decimal above 0 and at most 1 with at most 6 decimals (default 0.25)` },
  { name: 'ZENOVA_LEASE_REFRESH_MS', required: false, description: `how often a live node's leases are reconsidered, from 100 to ${MAX_LEASE_REFRESH_MS} (default ${DEFAULT_LEASE_POLICY.refreshMs})` },
  { name: 'ZENOVA_FAULT_DROP_ROTATION_REPLIES', required: false, description: 'fault tests only: drop the next N credential rotation replies (default 0)' },
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
    // The value is never quoted: a password may be anywhere in what does not parse.
    const hint = value.includes('@')
      ? `; ${PERCENT_ENCODE_ADVICE}`
      : /^\s*[a-z_]+\s*=/i.test(value)
        ? '; a libpq key=value connection string is not accepted, write it as postgres://USER:PASSWORD@HOST:PORT/DB'
        : '';
    return fail(ctx, `expected a postgres:// or postgresql:// URL (postgres://USER:PASSWORD@HOST:PORT/DB), got one that does not parse as a URL${hint}; the value is not shown, as it may hold the password`);
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    return fail(ctx, `expected a postgres:// or postgresql:// URL, got scheme '${url.protocol}'`);
  }
  // Checked before anything is quoted: the host, port and path of such a URL hold the password.
  const ambiguity = ambiguousDatabaseUrlReason(url);
  if (ambiguity !== undefined) {
    return fail(ctx, `cannot be read unambiguously: it ${ambiguity} (a password with '/', '?' or '#' written as it is ends the host early); ${PERCENT_ENCODE_ADVICE}; the URL is not shown, as it may hold the password`);
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
  // The console's login form takes at most this many: a longer token could never log in there.
  if (value.length > MAX_ADMIN_TOKEN_LENGTH) return fail(ctx, `expected at most ${MAX_ADMIN_TOKEN_LENGTH} characters, got ${value.length}`);
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
  // The console's address and the wizard's control-plane URL are built on it: no query or fragment.
  if (url.href.includes('?') || url.href.includes('#')) return fail(ctx, 'expected a URL without a query (?…) or fragment (#…)');
  return url.toString().replace(/\/$/, '');
});

/** An optional file path, resolved against the working directory. */
const filePath = raw.transform((value) => (value === undefined ? undefined : path.resolve(value)));

const gatewayListen = raw.transform((value, ctx) => {
  const address = parseListenAddress(value ?? DEFAULT_GATEWAY_LISTEN);
  if (!address) return fail(ctx, `expected HOST:PORT with a port from 0 to 65535, got ${quote(value ?? '')}`);
  return address;
});

const DNS_LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

/** True for an IPv4/IPv6 address or a DNS name (no scheme, no port, no wildcard). */
export function isGatewayHost(host: string): boolean {
  if (isIP(host) !== 0) return true;
  return host.length <= 253 && host.split('.').every((label) => DNS_LABEL.test(label));
}

const gatewayHosts = raw.transform((value, ctx) => {
  if (value === undefined) return [...DEFAULT_GATEWAY_HOSTS];
  const hosts = value.split(',').map((h) => h.trim().toLowerCase()).filter((h) => h !== '');
  if (hosts.length === 0) return fail(ctx, 'expected at least one DNS name or IP address');
  const bad = hosts.find((h) => !isGatewayHost(h));
  if (bad !== undefined) {
    return fail(ctx, `expected DNS names or IP addresses without scheme or port, got ${quote(bad)}`);
  }
  return [...new Set(hosts)];
});

/** Names proxy-addr (fastify's trustProxy) accepts for whole ranges. */
const PROXY_RANGE_NAMES = new Set(['loopback', 'linklocal', 'uniquelocal']);

function isProxyEntry(entry: string): boolean {
  if (PROXY_RANGE_NAMES.has(entry)) return true;
  const [address, prefix, ...rest] = entry.split('/');
  const family = isIP(address ?? '');
  if (family === 0 || rest.length > 0) return false;
  if (prefix === undefined) return true;
  return /^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 4 ? 32 : 128);
}

const trustedProxies = raw.transform((value, ctx) => {
  if (value === undefined) return [];
  const entries = value.split(',').map((entry) => entry.trim().toLowerCase()).filter((entry) => entry !== '');
  const bad = entries.find((entry) => !isProxyEntry(entry));
  if (bad !== undefined) return fail(ctx, `expected IP addresses, CIDRs (10.0.0.0/8) or loopback, linklocal, uniquelocal, got ${quote(bad)}`);
  return [...new Set(entries)];
});

const publicAddress = raw.transform((value, ctx) => {
  if (value === undefined) return undefined;
  const address = parseListenAddress(value);
  if (!address || address.port === 0 || !isGatewayHost(address.host.toLowerCase())) {
    return fail(ctx, `expected HOST:PORT with a port from 1 to 65535 (IPv6 in brackets), got ${quote(value)}`);
  }
  return { host: address.host.toLowerCase(), text: value };
});

const booleanFlag = raw.transform((value, ctx) => {
  if (value === undefined) return undefined;
  const v = value.toLowerCase();
  if (v === 'true' || v === '1' || v === 'yes') return true;
  if (v === 'false' || v === '0' || v === 'no') return false;
  return fail(ctx, `expected true or false, got ${quote(value)}`);
});

/** A duration in seconds (decimals allowed, for tests), returned in milliseconds. */
/** The rotation age's default is worked out from the validity (loadSettings). */
const ROTATE_AFTER_UNSET = -1;

function seconds(defaultSeconds: number, minSeconds: number) {
  return raw.transform((value, ctx) => {
    if (value === undefined) return defaultSeconds * 1000;
    const n = /^\d+(\.\d{1,3})?$/.test(value) ? Number(value) : NaN;
    if (!Number.isFinite(n) || n < minSeconds || n > MAX_DURATION_SECONDS) {
      return fail(ctx, `expected a number of seconds from ${minSeconds} to ${MAX_DURATION_SECONDS}, got ${quote(value)}`);
    }
    return Math.round(n * 1000);
  });
}

function integer(defaultValue: number, min: number, max: number) {
  return raw.transform((value, ctx) => {
    if (value === undefined) return defaultValue;
    const n = /^\d+$/.test(value) ? Number(value) : NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      return fail(ctx, `expected a whole number from ${min} to ${max}, got ${quote(value)}`);
    }
    return n;
  });
}

/** A lease share as parts per million, exactly (no floats): "0.25" → 250000; above 0, at most 1, ≤ 6 decimals. */
const leaseShare = raw.transform((value, ctx) => {
  if (value === undefined) return DEFAULT_LEASE_POLICY.sharePpm;
  const match = /^(0|1)(?:\.(\d{1,6}))?$/.exec(value.trim());
  const ppm = match ? BigInt(match[1]!) * 1_000_000n + BigInt((match[2] ?? '').padEnd(6, '0')) : 0n;
  if (ppm <= 0n || ppm > 1_000_000n) {
    return fail(ctx, `expected a decimal above 0 and at most 1 with at most 6 decimals (e.g. 0.25), got ${quote(value)}`);
  }
  return ppm;
});

const environmentSchema = z.object({
  ZENOVA_DATABASE_URL: databaseUrl,
  ZENOVA_LISTEN: listen,
  ZENOVA_ADMIN_TOKEN: adminToken,
  ZENOVA_SECRET_ENC_KEY: secretEncKey,
  ZENOVA_LOG_LEVEL: logLevel,
  ZENOVA_PUBLIC_URL: publicUrl,
  ZENOVA_TLS_CERT_FILE: filePath,
  ZENOVA_TLS_KEY_FILE: filePath,
  ZENOVA_TRUSTED_PROXIES: trustedProxies,
  ZENOVA_GATEWAY_LISTEN: gatewayListen,
  ZENOVA_GATEWAY_HOSTS: gatewayHosts,
  ZENOVA_GATEWAY_PUBLIC_ADDRESS: publicAddress,
  ZENOVA_GATEWAY_TLS_DIR: filePath,
  ZENOVA_GATEWAY_TLS_AUTO_GENERATE: booleanFlag,
  ZENOVA_GATEWAY_CERT_FILE: filePath,
  ZENOVA_GATEWAY_KEY_FILE: filePath,
  ZENOVA_GATEWAY_TRUST_BUNDLE: filePath,
  ZENOVA_NODE_OFFLINE_AFTER_SECONDS: seconds(120, 1),
  ZENOVA_CREDENTIAL_VALIDITY_SECONDS: seconds(30 * DAY_SECONDS, 1),
  // Unset: a day, or half the validity when that is shorter (loadSettings), so a shorter validity
  // set before the half-validity rule existed still starts.
  ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS: seconds(ROTATE_AFTER_UNSET, 0),
  ZENOVA_CREDENTIAL_HANDOVER_SECONDS: seconds(3600, 0),
  ZENOVA_HEARTBEAT_INTERVAL_MS: integer(HEARTBEAT_INTERVAL_UNSET, 100, 3_600_000),
  ZENOVA_INSTALL_TOKEN_TTL_SECONDS: seconds(DAY_SECONDS, 1),
  ZENOVA_ENROLL_ATTEMPTS_PER_MINUTE: integer(10, 1, 100_000),
  ZENOVA_LEASE_CAP_MICROS: integer(Number(DEFAULT_LEASE_POLICY.capMicros), 1, MAX_LEASE_CAP_MICROS),
  ZENOVA_LEASE_SHARE: leaseShare,
  ZENOVA_LEASE_REFRESH_MS: integer(DEFAULT_LEASE_POLICY.refreshMs, 100, MAX_LEASE_REFRESH_MS),
  ZENOVA_FAULT_DROP_ROTATION_REPLIES: integer(0, 0, 1_000_000),
} satisfies Record<VariableName, z.ZodType>).superRefine((v, ctx) => {
  // Rules between variables; each problem is reported under the variable to change.
  const problem = (name: VariableName, message: string): void => {
    ctx.addIssue({ code: 'custom', path: [name], message });
  };
  if ((v.ZENOVA_TLS_CERT_FILE === undefined) !== (v.ZENOVA_TLS_KEY_FILE === undefined)) {
    const missing = v.ZENOVA_TLS_CERT_FILE === undefined ? 'ZENOVA_TLS_CERT_FILE' : 'ZENOVA_TLS_KEY_FILE';
    problem(missing, 'is required together with ' + (missing === 'ZENOVA_TLS_CERT_FILE' ? 'ZENOVA_TLS_KEY_FILE' : 'ZENOVA_TLS_CERT_FILE') + ' (set both for HTTPS, or neither)');
  }
  if ((v.ZENOVA_GATEWAY_CERT_FILE === undefined) !== (v.ZENOVA_GATEWAY_KEY_FILE === undefined)) {
    const missing = v.ZENOVA_GATEWAY_CERT_FILE === undefined ? 'ZENOVA_GATEWAY_CERT_FILE' : 'ZENOVA_GATEWAY_KEY_FILE';
    problem(missing, 'is required together with ' + (missing === 'ZENOVA_GATEWAY_CERT_FILE' ? 'ZENOVA_GATEWAY_KEY_FILE' : 'ZENOVA_GATEWAY_CERT_FILE') + ' (external certificate mode)');
  }
  const external = v.ZENOVA_GATEWAY_CERT_FILE !== undefined;
  if (external && v.ZENOVA_GATEWAY_TLS_AUTO_GENERATE === true) {
    problem('ZENOVA_GATEWAY_TLS_AUTO_GENERATE', 'cannot be true with ZENOVA_GATEWAY_CERT_FILE set (an external certificate turns auto-generation off)');
  }
  if (!external && v.ZENOVA_GATEWAY_TRUST_BUNDLE !== undefined) {
    problem('ZENOVA_GATEWAY_TRUST_BUNDLE', 'is only used with an external certificate: set ZENOVA_GATEWAY_CERT_FILE and ZENOVA_GATEWAY_KEY_FILE too, or unset it');
  }
  // DESIGN §3: rotation long before expiry, so a node briefly away at rotation time still gets a
  // successor; a credential never rotated before it expires locks its node out.
  const rotateAfterMs = v.ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS;
  const validityMs = v.ZENOVA_CREDENTIAL_VALIDITY_SECONDS;
  if (rotateAfterMs !== ROTATE_AFTER_UNSET * 1000 && rotateAfterMs * 2 > validityMs) {
    problem(
      'ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS',
      `${rotateAfterMs / 1000} must be at most half of ZENOVA_CREDENTIAL_VALIDITY_SECONDS ${validityMs / 1000} (at most ${Math.floor(validityMs / 2) / 1000}), ` +
        'so credentials are rotated well before they expire: lower it, or raise the validity',
    );
  }
  // A node is offline once no heartbeat came for the offline timeout (nodes/node-view.ts); two
  // intervals within it keep a healthy node online through one late or lost heartbeat. Only a value
  // set is refused: unset, it is derived (heartbeatInterval), so a short offline timeout alone still starts.
  const intervalMs = v.ZENOVA_HEARTBEAT_INTERVAL_MS;
  const offlineAfterMs = v.ZENOVA_NODE_OFFLINE_AFTER_SECONDS;
  if (intervalMs !== HEARTBEAT_INTERVAL_UNSET && Math.min(intervalMs, NODE_MAX_HEARTBEAT_INTERVAL_MS) * 2 > offlineAfterMs) {
    problem(
      'ZENOVA_HEARTBEAT_INTERVAL_MS',
      `${intervalMs} must be at most half of ZENOVA_NODE_OFFLINE_AFTER_SECONDS ${offlineAfterMs / 1000} (at most ${Math.floor(offlineAfterMs / 2)} ms), ` +
        'or healthy nodes are shown offline between heartbeats: lower it, or raise the offline timeout',
    );
  }
  const target = v.ZENOVA_GATEWAY_PUBLIC_ADDRESS;
  if (target && !v.ZENOVA_GATEWAY_HOSTS.includes(target.host)) {
    problem('ZENOVA_GATEWAY_PUBLIC_ADDRESS', `host '${target.host}' must be one of ZENOVA_GATEWAY_HOSTS (${v.ZENOVA_GATEWAY_HOSTS.join(',')}) so the gateway certificate covers it`);
  }
});

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
    tls: v.ZENOVA_TLS_CERT_FILE !== undefined && v.ZENOVA_TLS_KEY_FILE !== undefined
      ? { certFile: v.ZENOVA_TLS_CERT_FILE, keyFile: v.ZENOVA_TLS_KEY_FILE }
      : undefined,
    trustedProxies: v.ZENOVA_TRUSTED_PROXIES,
    gateway: {
      listen: v.ZENOVA_GATEWAY_LISTEN,
      hosts: v.ZENOVA_GATEWAY_HOSTS,
      publicAddress: v.ZENOVA_GATEWAY_PUBLIC_ADDRESS?.text,
      tlsDir: v.ZENOVA_GATEWAY_TLS_DIR ?? path.resolve(DEFAULT_GATEWAY_TLS_DIR),
      autoGenerate: v.ZENOVA_GATEWAY_TLS_AUTO_GENERATE ?? v.ZENOVA_GATEWAY_CERT_FILE === undefined,
      certFile: v.ZENOVA_GATEWAY_CERT_FILE,
      keyFile: v.ZENOVA_GATEWAY_KEY_FILE,
      trustBundleFile: v.ZENOVA_GATEWAY_TRUST_BUNDLE,
    },
    nodes: {
      offlineAfterMs: v.ZENOVA_NODE_OFFLINE_AFTER_SECONDS,
      credentialValidityMs: v.ZENOVA_CREDENTIAL_VALIDITY_SECONDS,
      credentialRotateAfterMs: v.ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS === ROTATE_AFTER_UNSET * 1000
        ? Math.min(DAY_SECONDS * 1000, Math.floor(v.ZENOVA_CREDENTIAL_VALIDITY_SECONDS / 2))
        : v.ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS,
      credentialHandoverMs: v.ZENOVA_CREDENTIAL_HANDOVER_SECONDS,
      heartbeatIntervalMs: v.ZENOVA_HEARTBEAT_INTERVAL_MS === HEARTBEAT_INTERVAL_UNSET
        ? Math.min(DEFAULT_HEARTBEAT_INTERVAL_MS, Math.floor(v.ZENOVA_NODE_OFFLINE_AFTER_SECONDS / 2))
        : v.ZENOVA_HEARTBEAT_INTERVAL_MS,
      installTokenTtlMs: v.ZENOVA_INSTALL_TOKEN_TTL_SECONDS,
      enrollAttemptsPerMinute: v.ZENOVA_ENROLL_ATTEMPTS_PER_MINUTE,
    },
    leases: {
      capMicros: BigInt(v.ZENOVA_LEASE_CAP_MICROS),
      sharePpm: v.ZENOVA_LEASE_SHARE,
      refreshMs: v.ZENOVA_LEASE_REFRESH_MS,
    },
    faults: { dropRotationReplies: v.ZENOVA_FAULT_DROP_ROTATION_REPLIES },
  };
}
