/**
 * The signed config bundle: what a node needs to serve, as the control plane publishes it. Both
 * sides read this one schema. On the wire (`ConfigPush.bundle`) a bundle is its canonical JSON
 * (`canonicalJson`: sorted keys, no whitespace), and `ConfigPush.signature` is the Ed25519
 * signature of exactly those bytes with the control plane's config-signing key, whose public half
 * the node pinned at enrollment. The node verifies the signature BEFORE parsing, then this schema,
 * then that the version is not older than what it has.
 */
import { createHash, createPublicKey, verify } from 'node:crypto';
import { z } from 'zod';

export const CONFIG_BUNDLE_SCHEMA_VERSION = 1;
/** A bundle larger than this is refused before it is parsed. */
export const MAX_CONFIG_BUNDLE_BYTES = 8 * 1024 * 1024;
/** How many of each fleet-wide kind a bundle may hold; the control plane refuses a change past one. */
export const MAX_BUNDLE_ITEMS = {
  accounts: 100_000,
  apiKeys: 1_000_000,
  upstreams: 1000,
  routes: 10_000,
  guardrailPolicies: 1000,
  prices: 10_000,
  toolServers: 1000,
} as const;

const id = z.string().min(1).max(128);
const name = z.string().min(1).max(128);
const isoTime = z.iso.datetime({ offset: true });

export const rateLimitSchema = z.strictObject({
  requestsPerMinute: z.int().min(1).max(10_000_000).optional(),
  tokensPerMinute: z.int().min(1).max(10_000_000_000).optional(),
  concurrentRequests: z.int().min(1).max(100_000).optional(),
});

export const bundleAccountSchema = z.strictObject({
  id,
  name,
  status: z.enum(['active', 'suspended']),
  /** A named rate-limit policy, resolved into its limits here so the node needs no lookup. */
  limits: rateLimitSchema,
});

export const bundleApiKeySchema = z.strictObject({
  id,
  accountId: id,
  name,
  /** Lowercase hex SHA-256 of the key; the key itself never leaves the moment it was created. */
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  /** Model aliases this key may use; null means every alias the node routes. */
  allowedModels: z.array(name).max(1000).nullable(),
  /**
   * Tool server names this key may reach at /mcp/{server}; null or absent means every one. Added in
   * schema 1 without a bump: the control plane leaves it out when null, so an unrestricted key's
   * bundle is what an older node (whose schema is strict) accepts; a restricted key's it refuses.
   */
  allowedToolServers: z.array(name).max(1000).nullable().optional(),
  expiresAt: isoTime.nullable(),
  status: z.enum(['active', 'revoked']),
  limits: rateLimitSchema,
  guardrailPolicyId: id.nullable(),
});

export const bundleUpstreamSchema = z.strictObject({
  id,
  name,
  kind: z.enum(['openai', 'anthropic', 'openai-compatible']),
  /** The upstream's API base, e.g. https://api.openai.com/v1. */
  baseUrl: z.url({ protocol: /^https?$/ }),
  /** The provider secret, decrypted for this node only; never logged, never returned by the API. */
  apiKey: z.string().min(1).max(4096).nullable(),
  timeoutMs: z.int().min(100).max(600_000),
});

export const routeTargetSchema = z.strictObject({
  upstream: name,
  model: z.string().min(1).max(256),
  weight: z.int().min(0).max(1000),
});

export const bundleRouteSchema = z.strictObject({
  /** What callers put in `model`. */
  alias: z.string().min(1).max(256),
  targets: z.array(routeTargetSchema).min(1).max(32),
  fallbacks: z.array(routeTargetSchema.omit({ weight: true })).max(32),
  timeoutMs: z.int().min(100).max(600_000),
  retries: z.int().min(0).max(5),
});

export const guardrailPolicySchema = z.strictObject({
  id,
  name,
  rules: z.array(z.strictObject({
    detector: z.enum(['regex', 'keywords', 'email', 'phone', 'prc-resident-id', 'bank-card', 'secret']),
    /** For regex: the pattern; for keywords: the list. */
    pattern: z.string().max(4096).optional(),
    keywords: z.array(z.string().min(1).max(256)).max(10_000).optional(),
    action: z.enum(['block', 'mask', 'flag']),
    on: z.enum(['input', 'output', 'both']),
  })).max(200),
});

/** An MCP tool server reachable over streamable HTTP; callers reach it at /mcp/{name} on the node. */
export const toolServerSchema = z.strictObject({
  name: z.string().regex(/^[a-z0-9][a-z0-9-]{0,62}$/),
  /** The server's MCP endpoint, e.g. https://tools.internal/mcp. */
  url: z.url({ protocol: /^https?$/ }),
  /** Sent as "Authorization: Bearer …" to the tool server; decrypted for this node only, never logged. */
  apiKey: z.string().min(1).max(4096).nullable(),
  timeoutMs: z.int().min(100).max(600_000),
  /** Integer micro-units charged per tool call (0 = free). */
  callMicros: z.int().min(0),
});

export const priceSchema = z.strictObject({
  /** A route alias. */
  model: z.string().min(1).max(256),
  /** Integer micro-units of the account currency per token / per request. */
  inputMicrosPerToken: z.int().min(0),
  outputMicrosPerToken: z.int().min(0),
  requestMicros: z.int().min(0),
});

export const configBundleSchema = z.strictObject({
  schemaVersion: z.literal(CONFIG_BUNDLE_SCHEMA_VERSION),
  /** Strictly increasing across every change on the control plane. */
  version: z.int().min(1),
  nodeId: id,
  nodeName: name,
  issuedAt: isoTime,
  node: z.strictObject({
    surfaces: z.array(z.enum(['model', 'tools'])).min(1),
    spool: z.strictObject({ quotaBytes: z.int().min(0), fullPolicy: z.enum(['reject', 'metering-only']) }),
  }),
  accounts: z.array(bundleAccountSchema).max(MAX_BUNDLE_ITEMS.accounts),
  apiKeys: z.array(bundleApiKeySchema).max(MAX_BUNDLE_ITEMS.apiKeys),
  upstreams: z.array(bundleUpstreamSchema).max(MAX_BUNDLE_ITEMS.upstreams),
  routes: z.array(bundleRouteSchema).max(MAX_BUNDLE_ITEMS.routes),
  guardrailPolicies: z.array(guardrailPolicySchema).max(MAX_BUNDLE_ITEMS.guardrailPolicies),
  prices: z.array(priceSchema).max(MAX_BUNDLE_ITEMS.prices),
  /** Added in bundle schema 1 without a bump: a control plane that names none sends []. */
  toolServers: z.array(toolServerSchema).max(MAX_BUNDLE_ITEMS.toolServers).default([]),
});

export type ConfigBundle = z.infer<typeof configBundleSchema>;
export type RateLimits = z.infer<typeof rateLimitSchema>;
export type GuardrailPolicy = z.infer<typeof guardrailPolicySchema>;
export type GuardrailRule = GuardrailPolicy['rules'][number];
export type Price = z.infer<typeof priceSchema>;
export type ToolServer = z.infer<typeof toolServerSchema>;
export type Surface = ConfigBundle['node']['surfaces'][number];
export type SpoolSettings = ConfigBundle['node']['spool'];

/** JSON with object keys sorted at every level and no whitespace: one byte string per value. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'number' && !Number.isFinite(value)) throw new Error('canonicalJson: non-finite number');
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v === undefined ? null : v)).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

/**
 * SHA-256 of a bundle's content: its canonical JSON without `issuedAt`, the one member that
 * differs between two builds of one version. Equal for the same config at the same version built
 * by any control-plane replica at any time; different when a database restore made one version
 * number stand for another config (Hello.applied_config_content_sha256).
 */
export function configContentSha256(bundleBytes: Uint8Array): Buffer {
  const bytes = Buffer.from(bundleBytes.buffer, bundleBytes.byteOffset, bundleBytes.byteLength);
  // A bundle is canonical JSON (verifyConfigBundle refuses any other), so its content is its bytes
  // with the top-level issuedAt member cut out: hashed as it lies, without parsing and re-writing
  // megabytes on every hello and every replica's cache poll.
  const member = topLevelIssuedAt(bytes);
  if (member === undefined) {
    const { issuedAt: _issuedAt, ...content } = JSON.parse(bytes.toString('utf8')) as Record<string, unknown>;
    return createHash('sha256').update(canonicalJson(content), 'utf8').digest();
  }
  return createHash('sha256').update(bytes.subarray(0, member.start)).update(bytes.subarray(member.end)).digest();
}

const ISSUED_AT_KEY = Buffer.from('"issuedAt":"');
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * Where the top-level `"issuedAt":"…"` member lies in canonical JSON bytes, with the comma that
 * joins it to a neighbour (so what is left is the canonical JSON of the rest), or undefined when the
 * bytes do not look like a canonical object with that member as a string.
 */
function topLevelIssuedAt(bytes: Buffer): { start: number; end: number } | undefined {
  if (bytes[0] !== 0x7b) return undefined;
  let depth = 0;
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i];
    if (c === QUOTE) {
      const previous = bytes[i - 1];
      if (depth === 1 && (previous === 0x7b || previous === 0x2c) && bytes.subarray(i, i + ISSUED_AT_KEY.length).equals(ISSUED_AT_KEY)) {
        const close = bytes.indexOf(QUOTE, i + ISSUED_AT_KEY.length);
        if (close < 0 || bytes.subarray(i + ISSUED_AT_KEY.length, close).includes(BACKSLASH)) return undefined;
        const end = close + 1;
        if (previous === 0x2c) return { start: i - 1, end };
        return bytes[end] === 0x2c ? { start: i, end: end + 1 } : { start: i, end };
      }
      // Skip the string, escapes included.
      for (i++; i < bytes.length && bytes[i] !== QUOTE; i++) if (bytes[i] === BACKSLASH) i++;
    } else if (c === 0x7b || c === 0x5b) {
      depth++;
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
    }
  }
  return undefined;
}

export type BundleCheck =
  | { ok: true; bundle: ConfigBundle }
  | { ok: false; code: 'CONFIG_TOO_LARGE' | 'CONFIG_BAD_SIGNATURE' | 'CONFIG_NOT_JSON' | 'CONFIG_SCHEMA' | 'CONFIG_NOT_CANONICAL'; message: string };

/**
 * Verify a pushed or cached bundle: size, Ed25519 signature over the exact bytes with the pinned
 * public key, JSON, canonical form, schema. Version ordering and node id are the caller's checks.
 */
export function verifyConfigBundle(bytes: Uint8Array, signature: Uint8Array, publicKeyPem: string): BundleCheck {
  if (bytes.byteLength > MAX_CONFIG_BUNDLE_BYTES) {
    return { ok: false, code: 'CONFIG_TOO_LARGE', message: `the bundle is ${bytes.byteLength} bytes; the limit is ${MAX_CONFIG_BUNDLE_BYTES}` };
  }
  let valid = false;
  try {
    valid = verify(null, bytes, createPublicKey(publicKeyPem), signature);
  } catch {
    valid = false;
  }
  if (!valid) {
    return { ok: false, code: 'CONFIG_BAD_SIGNATURE', message: "the bundle's signature does not verify with the config-signing key pinned at enrollment" };
  }
  const text = Buffer.from(bytes).toString('utf8');
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { ok: false, code: 'CONFIG_NOT_JSON', message: 'the bundle is not JSON' };
  }
  if (canonicalJson(parsed) !== text) return { ok: false, code: 'CONFIG_NOT_CANONICAL', message: 'the bundle is not in canonical form' };
  const result = configBundleSchema.safeParse(parsed);
  if (!result.success) {
    const issue = result.error.issues[0];
    return { ok: false, code: 'CONFIG_SCHEMA', message: `the bundle does not match schema v${CONFIG_BUNDLE_SCHEMA_VERSION}: ${issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}` : 'invalid'}` };
  }
  return { ok: true, bundle: result.data };
}
