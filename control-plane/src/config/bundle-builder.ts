/**
 * Builds the config bundle a node serves from (proto/src/config-bundle.ts) out of PostgreSQL, and
 * signs its canonical bytes with the config-signing key. The latest version, the node's own row and
 * the config tables are read in ONE repeatable-read snapshot: config writers commit versions in order
 * (config-changes.ts), so the bundle labelled version N holds exactly the changes up to N.
 *
 * Scope: the node's own id, name, surfaces and spool; the fleet-wide accounts, keys (active and
 * revoked, so a node tells "revoked" from "unknown"), routes, guardrail policies, prices and tool
 * servers; and only the upstreams some route names — a node never receives a provider secret it
 * cannot use. Tool servers all go (with their keys): a node reaches them by name, /mcp/{name}.
 *
 * A bundle carries decrypted upstream and tool server secrets: never log one, nor an error that quotes its values.
 */
import { createHash, createPublicKey } from 'node:crypto';
import type pg from 'pg';
import { MAX_CONFIG_BUNDLE_BYTES, canonicalJson, configBundleSchema, type ConfigBundle } from '../../../proto/src/index.js';
import type { SecretBox } from '../crypto/secret-box.js';
import type { Queryable } from '../nodes/with-transaction.js';
import { openToolServerSecret } from '../tools/tool-server-secret.js';
import { latestConfigVersion } from './config-changes.js';
import type { ConfigSigningKey } from './signing-key.js';

/** The parts of a bundle every node shares at one version. */
export type FleetConfig = Pick<ConfigBundle, 'accounts' | 'apiKeys' | 'upstreams' | 'routes' | 'guardrailPolicies' | 'prices' | 'toolServers'>;

/** The parts of a bundle that are the node's own. */
export type BundleNode = Pick<ConfigBundle, 'nodeId' | 'nodeName' | 'node'>;

/** What goes on the wire as a ConfigPush. */
export interface SignedBundle {
  version: number;
  /** canonicalJson(bundle) as UTF-8: exactly the signed bytes. */
  bytes: Buffer;
  /** Ed25519 over `bytes`. */
  signature: Buffer;
  keyId: string;
}

export class BundleBuildError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BundleBuildError';
  }
}

const GIB = 2 ** 30;
const SECRET_CONTEXT_PREFIX = 'upstream-secret:';

/** A short, stable name for the signing key: the first 16 hex digits of SHA-256 over its SPKI DER. */
export function configSigningKeyId(publicKeyPem: string): string {
  const known = keyIds.get(publicKeyPem);
  if (known !== undefined) return known;
  const der = createPublicKey(publicKeyPem).export({ type: 'spki', format: 'der' });
  const id = `ed25519:${createHash('sha256').update(der).digest('hex').slice(0, 16)}`;
  keyIds.set(publicKeyPem, id);
  return id;
}

// One signing key per process in practice; no need to re-hash it for every push.
const keyIds = new Map<string, string>();

/**
 * Runs `fn` in a read-only REPEATABLE READ transaction: every query sees one snapshot. On a client
 * (not the pool) the caller is assumed to hold its own transaction, and `fn` runs on it as is.
 */
export async function inConfigSnapshot<T>(db: Queryable, fn: (client: Queryable) => Promise<T>): Promise<T> {
  if (isPoolClient(db)) return fn(db);
  const client = await db.connect();
  let broken = false;
  try {
    await client.query('begin isolation level repeatable read read only');
    const result = await fn(client);
    await client.query('commit');
    return result;
  } catch (err) {
    await client.query('rollback').catch(() => { broken = true; });
    throw err;
  } finally {
    client.release(broken);
  }
}

function isPoolClient(db: Queryable): db is pg.PoolClient {
  return typeof (db as Partial<pg.PoolClient>).release === 'function';
}

// ---- reading ----

/** A bigint column (pg returns it as text) as an exact JS number. */
function exactNumber(value: string | number, what: string): number {
  const n = typeof value === 'number' ? value : Number(value);
  if (!Number.isSafeInteger(n)) throw new BundleBuildError(`${what} is not an exact integer`);
  return n;
}

interface LimitColumns {
  requests_per_minute: number | null;
  tokens_per_minute: string | null;
  concurrent_requests: number | null;
}

function limitsOf(row: LimitColumns): ConfigBundle['accounts'][number]['limits'] {
  const limits: ConfigBundle['accounts'][number]['limits'] = {};
  if (row.requests_per_minute !== null) limits.requestsPerMinute = row.requests_per_minute;
  if (row.tokens_per_minute !== null) limits.tokensPerMinute = exactNumber(row.tokens_per_minute, 'tokens_per_minute');
  if (row.concurrent_requests !== null) limits.concurrentRequests = row.concurrent_requests;
  return limits;
}

// A policy that was deleted while still referenced imposes nothing: it no longer exists.
const LIMIT_SELECT = 'p.requests_per_minute, p.tokens_per_minute::text as tokens_per_minute, p.concurrent_requests';

async function readAccounts(db: Queryable): Promise<FleetConfig['accounts']> {
  const { rows } = await db.query<LimitColumns & { id: string; name: string; status: 'active' | 'suspended' }>(
    `select a.id, a.name, a.status, ${LIMIT_SELECT}
       from accounts a
       left join rate_limit_policies p on p.id = a.rate_limit_policy_id and p.deleted_at is null
      where a.deleted_at is null
      order by a.id`,
  );
  return rows.map((r) => ({ id: r.id, name: r.name, status: r.status, limits: limitsOf(r) }));
}

// The latest time the bundle's ISO 8601 times can carry (four-digit years). Older releases stored
// expiries past it (9999-12-31T23:59:59-12:00 is year 10000 UTC), which would stop every bundle:
// such a key is written as expiring at this moment instead, which in practice is never.
const LATEST_BUNDLE_TIME_MS = Date.parse('9999-12-31T23:59:59.999Z');

function bundleTime(at: Date): string {
  return at.getTime() > LATEST_BUNDLE_TIME_MS ? new Date(LATEST_BUNDLE_TIME_MS).toISOString() : at.toISOString();
}

async function readApiKeys(db: Queryable): Promise<FleetConfig['apiKeys']> {
  const { rows } = await db.query<LimitColumns & {
    id: string; account_id: string; name: string; sha256: string; allowed_models: string[] | null;
    allowed_tool_servers: string[] | null; expires_at: Date | null; status: 'active' | 'revoked';
    guardrail_policy_id: string | null;
  }>(
    // Keys of a deleted account are left out: the node then treats them as unknown.
    `select k.id, k.account_id, k.name, encode(k.key_hash, 'hex') as sha256, k.allowed_models, k.allowed_tool_servers,
            k.expires_at, k.status, g.id as guardrail_policy_id, ${LIMIT_SELECT}
       from api_keys k
       join accounts a on a.id = k.account_id and a.deleted_at is null
       left join rate_limit_policies p on p.id = k.rate_limit_policy_id and p.deleted_at is null
       left join guardrail_policies g on g.id = k.guardrail_policy_id and g.deleted_at is null
      order by k.id`,
  );
  return rows.map((r) => ({
    id: r.id,
    accountId: r.account_id,
    name: r.name,
    sha256: r.sha256,
    allowedModels: r.allowed_models,
    // Left out when null: an unrestricted key's entry stays what older nodes' strict schema accepts.
    ...(r.allowed_tool_servers === null ? {} : { allowedToolServers: r.allowed_tool_servers }),
    expiresAt: r.expires_at === null ? null : bundleTime(r.expires_at),
    status: r.status,
    limits: limitsOf(r),
    guardrailPolicyId: r.guardrail_policy_id,
  }));
}

interface StoredTarget { upstream?: unknown; model?: unknown; weight?: unknown }

function targetsOf(value: unknown): StoredTarget[] {
  return Array.isArray(value) ? (value as StoredTarget[]) : [];
}

async function readRoutes(db: Queryable): Promise<FleetConfig['routes']> {
  const { rows } = await db.query<{ alias: string; targets: unknown; fallbacks: unknown; timeout_ms: number; retries: number }>(
    'select alias, targets, fallbacks, timeout_ms, retries from routes where deleted_at is null order by alias',
  );
  // Only the fields the bundle defines: whatever else the JSON column holds stays home (the schema
  // check afterwards refuses anything malformed).
  return rows.map((r) => ({
    alias: r.alias,
    targets: targetsOf(r.targets).map((t) => ({ upstream: t.upstream as string, model: t.model as string, weight: (t.weight ?? 1) as number })),
    fallbacks: targetsOf(r.fallbacks).map((t) => ({ upstream: t.upstream as string, model: t.model as string })),
    timeoutMs: r.timeout_ms,
    retries: r.retries,
  }));
}

async function readUpstreams(db: Queryable, secretBox: SecretBox, used: ReadonlySet<string>): Promise<FleetConfig['upstreams']> {
  const { rows } = await db.query<{
    id: string; name: string; kind: 'openai' | 'anthropic' | 'openai-compatible'; base_url: string;
    secret_encrypted: Buffer | null; timeout_ms: number;
  }>('select id, name, kind, base_url, secret_encrypted, timeout_ms from upstreams where deleted_at is null order by name');
  return rows
    .filter((r) => used.has(r.name))
    .map((r) => ({
      id: r.id,
      name: r.name,
      kind: r.kind,
      baseUrl: r.base_url,
      // A wrong ZENOVA_SECRET_ENC_KEY or damaged bytes throw SecretBoxError, whose message names no secret.
      apiKey: r.secret_encrypted === null ? null : secretBox.open(r.secret_encrypted, `${SECRET_CONTEXT_PREFIX}${r.id}`).toString('utf8'),
      timeoutMs: r.timeout_ms,
    }));
}

async function readGuardrailPolicies(db: Queryable): Promise<FleetConfig['guardrailPolicies']> {
  const { rows } = await db.query<{ id: string; name: string; rules: unknown }>(
    'select id, name, rules from guardrail_policies where deleted_at is null order by name',
  );
  return rows.map((r) => ({ id: r.id, name: r.name, rules: r.rules as FleetConfig['guardrailPolicies'][number]['rules'] }));
}

async function readPrices(db: Queryable): Promise<FleetConfig['prices']> {
  const { rows } = await db.query<{ model: string; input: string; output: string; request: string }>(
    `select model, input_micros_per_token::text as input, output_micros_per_token::text as output,
            request_micros::text as request
       from prices order by model`,
  );
  return rows.map((r) => ({
    model: r.model,
    inputMicrosPerToken: exactNumber(r.input, `prices[${r.model}].inputMicrosPerToken`),
    outputMicrosPerToken: exactNumber(r.output, `prices[${r.model}].outputMicrosPerToken`),
    requestMicros: exactNumber(r.request, `prices[${r.model}].requestMicros`),
  }));
}

async function readToolServers(db: Queryable, secretBox: SecretBox): Promise<FleetConfig['toolServers']> {
  const { rows } = await db.query<{ id: string; name: string; url: string; secret_encrypted: Buffer | null; timeout_ms: number; call_micros: string }>(
    `select id, name, url, secret_encrypted, timeout_ms, call_micros::text as call_micros
       from tool_servers where deleted_at is null order by name`,
  );
  return rows.map((r) => ({
    name: r.name,
    url: r.url,
    // A wrong ZENOVA_SECRET_ENC_KEY or damaged bytes throw SecretBoxError, whose message names no secret.
    apiKey: r.secret_encrypted === null ? null : openToolServerSecret(secretBox, r.id, r.secret_encrypted),
    timeoutMs: r.timeout_ms,
    callMicros: exactNumber(r.call_micros, `toolServers[${r.name}].callMicros`),
  }));
}

const fleetSchema = configBundleSchema.pick({ accounts: true, apiKeys: true, upstreams: true, routes: true, guardrailPolicies: true, prices: true, toolServers: true });
const nodePartSchema = configBundleSchema.pick({ nodeId: true, nodeName: true, node: true });

/** Paths and rules only: a zod issue's path never holds a value, so no secret can leak through it. */
function schemaFailure(what: string, error: { issues: ReadonlyArray<{ path: PropertyKey[]; message: string }> }): BundleBuildError {
  const issue = error.issues[0];
  const where = issue ? `${issue.path.map(String).join('.') || '(root)'}: ${issue.message}` : 'invalid';
  return new BundleBuildError(`the stored config does not make a valid bundle (${what} ${where}); fix it through the admin API`);
}

/** Everything nodes share, as of `db`'s snapshot; refused when the stored rows break the bundle schema. */
export async function readFleetConfig(db: Queryable, secretBox: SecretBox): Promise<FleetConfig> {
  const accounts = await readAccounts(db);
  const apiKeys = await readApiKeys(db);
  const routes = await readRoutes(db);
  const used = new Set(routes.flatMap((r) => [...r.targets, ...r.fallbacks].map((t) => t.upstream)));
  const upstreams = await readUpstreams(db, secretBox, used);
  const guardrailPolicies = await readGuardrailPolicies(db);
  const prices = await readPrices(db);
  const toolServers = await readToolServers(db, secretBox);
  const fleet = { accounts, apiKeys, upstreams, routes, guardrailPolicies, prices, toolServers };
  const checked = fleetSchema.safeParse(fleet);
  if (!checked.success) throw schemaFailure('at', checked.error);
  return fleet;
}

/** The nodes' own parts of their bundles, by node id; a node that does not exist (or was deleted) is absent. */
export async function readBundleNodes(db: Queryable, nodeIds: readonly string[]): Promise<Map<string, BundleNode>> {
  const { rows } = await db.query<{ id: string; name: string; surfaces: Array<'model' | 'tools'>; spool_quota_gb: number; spool_full_policy: 'reject' | 'metering-only' }>(
    'select id, name, surfaces, spool_quota_gb, spool_full_policy from nodes where id = any($1::uuid[]) and deleted_at is null',
    [nodeIds],
  );
  const parts = new Map<string, BundleNode>();
  for (const row of rows) {
    const part: BundleNode = {
      nodeId: row.id,
      nodeName: row.name,
      node: { surfaces: row.surfaces, spool: { quotaBytes: row.spool_quota_gb * GIB, fullPolicy: row.spool_full_policy } },
    };
    const checked = nodePartSchema.safeParse(part);
    if (!checked.success) throw schemaFailure(`for node ${row.name} at`, checked.error);
    parts.set(row.id, part);
  }
  return parts;
}

/** The node's own part of its bundle; undefined when the node does not exist or was deleted. */
export async function readBundleNode(db: Queryable, nodeId: string): Promise<BundleNode | undefined> {
  return (await readBundleNodes(db, [nodeId])).get(nodeId);
}

export function assembleBundle(version: number, node: BundleNode, fleet: FleetConfig, issuedAt: Date = new Date()): ConfigBundle {
  return { schemaVersion: 1, version, ...node, issuedAt: issuedAt.toISOString(), ...fleet };
}

/**
 * The latest bundle for `nodeId`, read in one snapshot. Throws BundleBuildError when the node does
 * not exist (or was deleted) or the stored config breaks the schema.
 */
export async function buildNodeBundle(db: Queryable, nodeId: string, secretBox: SecretBox): Promise<ConfigBundle> {
  return inConfigSnapshot(db, async (client) => {
    const version = await latestConfigVersion(client);
    const node = await readBundleNode(client, nodeId);
    if (node === undefined) throw new BundleBuildError(`node ${nodeId} does not exist or was deleted`);
    const fleet = await readFleetConfig(client, secretBox);
    return assembleBundle(version, node, fleet);
  });
}

/** The canonical bytes of `bundle` and their signature, as a ConfigPush carries them. */
export function encodeSignedBundle(bundle: ConfigBundle, signingKey: ConfigSigningKey): SignedBundle {
  return signBundleBytes(bundle.version, Buffer.from(canonicalJson(bundle), 'utf8'), signingKey);
}

/** Signs bytes already in canonical form; refuses a bundle larger than nodes accept. */
export function signBundleBytes(version: number, bytes: Buffer, signingKey: ConfigSigningKey): SignedBundle {
  if (bytes.byteLength > MAX_CONFIG_BUNDLE_BYTES) {
    throw new BundleBuildError(`the config bundle of version ${version} is ${bytes.byteLength} bytes; nodes accept at most ${MAX_CONFIG_BUNDLE_BYTES}`);
  }
  const signature = signingKey.sign(bytes);
  return {
    version,
    bytes,
    signature: Buffer.from(signature.buffer, signature.byteOffset, signature.byteLength),
    keyId: configSigningKeyId(signingKey.publicKeyPem),
  };
}
