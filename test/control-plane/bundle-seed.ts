// Config rows for the bundle and config-publish tests, written as the admin API writes them: plain
// SQL plus recordConfigChange in the same transaction (so each write is a new config version and
// a NOTIFY). Every name carries a tag, so tests sharing a database do not collide.
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import type pg from 'pg';
import { recordConfigChange } from '../../control-plane/src/config/config-changes.js';
import type { SecretBox } from '../../control-plane/src/crypto/secret-box.js';
import { withTransaction } from '../../control-plane/src/nodes/with-transaction.js';

export interface SeededConfig {
  tag: string;
  version: number;
  rateLimitPolicyId: string;
  guardrailPolicyId: string;
  accountId: string;
  accountName: string;
  /** An active key (its secret and sha256) and a revoked one. */
  keySecret: string;
  keySha256: string;
  keyId: string;
  revokedKeyId: string;
  keyExpiresAt: string;
  upstreamId: string;
  upstreamName: string;
  /** The provider secret of the routed upstream: must reach the bundle and never a log. */
  upstreamSecret: string;
  /** An upstream no route names: the bundle must not carry it (nor its secret). */
  unusedUpstreamName: string;
  unusedUpstreamSecret: string;
  routeAlias: string;
  priceModel: string;
}

let seedCounter = 0;

export const GUARDRAIL_RULES = [
  { detector: 'email', action: 'mask', on: 'both' },
  { detector: 'keywords', keywords: ['project-x'], action: 'block', on: 'input' },
];

/** One of everything, each in its own transaction and config version. */
export async function seedConfig(pool: pg.Pool, secretBox: SecretBox): Promise<SeededConfig> {
  seedCounter += 1;
  const tag = `s${process.pid % 10_000}-${seedCounter}-${randomBytes(3).toString('hex')}`;
  const upstreamId = randomUUID();
  const unusedUpstreamId = randomUUID();
  const upstreamSecret = `sk-upstream-${randomBytes(18).toString('hex')}`;
  const unusedUpstreamSecret = `sk-unused-${randomBytes(18).toString('hex')}`;
  const keySecret = `zn_sk_${randomBytes(32).toString('base64url')}`;
  const keySha256 = createHash('sha256').update(keySecret).digest('hex');
  const keyExpiresAt = new Date(Date.now() + 86_400_000).toISOString();
  let version = 0;
  const write = async <T>(entity: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> =>
    withTransaction(pool, async (client) => {
      const result = await fn(client);
      version = await recordConfigChange(client, { entity: entity as 'account', entityId: null, action: 'create' });
      return result;
    });
  const id = async (c: pg.PoolClient, sql: string, params: unknown[]): Promise<string> => (await c.query<{ id: string }>(sql, params)).rows[0]!.id;

  const rateLimitPolicyId = await write('rate-limit-policy', (c) => id(c,
    `insert into rate_limit_policies (name, requests_per_minute, tokens_per_minute, concurrent_requests)
     values ($1, 600, 5000000000, 8) returning id`, [`rl-${tag}`]));
  const guardrailPolicyId = await write('guardrail-policy', (c) => id(c,
    'insert into guardrail_policies (name, rules) values ($1, $2) returning id', [`gr-${tag}`, JSON.stringify(GUARDRAIL_RULES)]));
  const accountName = `acct-${tag}`;
  const accountId = await write('account', (c) => id(c,
    'insert into accounts (name, rate_limit_policy_id) values ($1, $2) returning id', [accountName, rateLimitPolicyId]));
  const keyId = await write('api-key', (c) => id(c,
    `insert into api_keys (account_id, name, key_hash, key_prefix, allowed_models, expires_at, guardrail_policy_id)
     values ($1, $2, $3, $4, $5, $6, $7) returning id`,
    [accountId, `key-${tag}`, createHash('sha256').update(keySecret).digest(), keySecret.slice(0, 12), [`alias-${tag}`], keyExpiresAt, guardrailPolicyId]));
  const revokedKeyId = await write('api-key', (c) => id(c,
    `insert into api_keys (account_id, name, key_hash, key_prefix, status, revoked_at)
     values ($1, $2, $3, 'zn_sk_revoke', 'revoked', now()) returning id`,
    [accountId, `revoked-${tag}`, randomBytes(32)]));
  await write('upstream', (c) => c.query(
    `insert into upstreams (id, name, kind, base_url, secret_encrypted, timeout_ms) values ($1, $2, 'openai-compatible', 'http://127.0.0.1:9/v1', $3, 30000),
                                                                                            ($4, $5, 'openai', 'https://api.openai.test/v1', $6, 60000)`,
    [upstreamId, `up-${tag}`, secretBox.seal(upstreamSecret, `upstream-secret:${upstreamId}`),
      unusedUpstreamId, `unused-${tag}`, secretBox.seal(unusedUpstreamSecret, `upstream-secret:${unusedUpstreamId}`)]));
  const routeAlias = `alias-${tag}`;
  await write('route', (c) => c.query(
    `insert into routes (alias, targets, fallbacks, timeout_ms, retries) values ($1, $2, $3, 45000, 1)`,
    [routeAlias, JSON.stringify([{ upstream: `up-${tag}`, model: 'gpt-x', weight: 3 }]), JSON.stringify([{ upstream: `up-${tag}`, model: 'gpt-y' }])]));
  await write('price', (c) => c.query(
    `insert into prices (model, input_micros_per_token, output_micros_per_token, request_micros) values ($1, 2, 9007199254740991, 100)`,
    [routeAlias]));
  return {
    tag, version, rateLimitPolicyId, guardrailPolicyId, accountId, accountName, keySecret, keySha256, keyId, revokedKeyId, keyExpiresAt,
    upstreamId, upstreamName: `up-${tag}`, upstreamSecret, unusedUpstreamName: `unused-${tag}`, unusedUpstreamSecret, routeAlias, priceModel: routeAlias,
  };
}

/** One config change (a price moves), committed; resolves with its version. */
export async function changeConfig(pool: pg.Pool, model = 'price-churn'): Promise<number> {
  return withTransaction(pool, async (client) => {
    await client.query(
      `insert into prices (model, input_micros_per_token, output_micros_per_token) values ($1, 1, 1)
       on conflict (model) do update set input_micros_per_token = prices.input_micros_per_token + 1, updated_at = now()`,
      [model],
    );
    return recordConfigChange(client, { entity: 'price', entityId: model, action: 'update' });
  });
}
