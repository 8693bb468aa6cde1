// Signed config bundles for node tests: a throwaway Ed25519 signing key (its public half pinned in
// the test node's identity), a small bundle with an OpenAI-compatible upstream, accounts and keys,
// and the ConfigPush that carries it, signed exactly as the control plane signs (canonical JSON).
import { createHash, generateKeyPairSync, randomBytes, sign } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { canonicalJson } from '../../proto/src/index.js';
import type { ConfigBundle, ConfigPush } from '../../proto/src/index.js';

export interface TestSigner {
  publicKeyPem: string;
  privateKey: KeyObject;
  keyId: string;
}

export function createSigner(): TestSigner {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  return { publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(), privateKey, keyId: `test-${randomBytes(4).toString('hex')}` };
}

/** A caller key as the admin API hands it out, and the hash a bundle carries. */
export function newCallerKey(): { secret: string; sha256: string } {
  const secret = `zn_sk_${randomBytes(32).toString('base64url')}`;
  return { secret, sha256: createHash('sha256').update(secret).digest('hex') };
}

export const UPSTREAM_SECRET = 'sk-upstream-provider-secret-in-a-bundle-77';
export const ACCOUNT_ID = 'acct-1';

type BundleKey = ConfigBundle['apiKeys'][number];

/** An active key of ACCOUNT_ID with no limits; override what a test needs. */
export function bundleKey(id: string, sha256: string, overrides: Partial<BundleKey> = {}): BundleKey {
  return { id, accountId: ACCOUNT_ID, name: id, sha256, allowedModels: null, expiresAt: null, status: 'active', limits: {}, guardrailPolicyId: null, ...overrides };
}

/**
 * Version `version` for `nodeId`: upstream `demo` at `upstreamUrl` serving alias `echo` (and
 * `echo-2`) as demo-echo, one active account, and `keys`.
 */
export function testBundle(opts: { nodeId: string; version: number; upstreamUrl: string; keys: BundleKey[] } & Partial<ConfigBundle>): ConfigBundle {
  const { nodeId, version, upstreamUrl, keys, ...overrides } = opts;
  return {
    schemaVersion: 1,
    version,
    nodeId,
    nodeName: 'edge-test',
    issuedAt: new Date().toISOString(),
    node: { surfaces: ['model'], spool: { quotaBytes: 1 << 30, fullPolicy: 'reject' } },
    accounts: [{ id: ACCOUNT_ID, name: 'acme', status: 'active', limits: {} }],
    toolServers: [],
    apiKeys: keys,
    upstreams: [{ id: 'up-1', name: 'demo', kind: 'openai-compatible', baseUrl: upstreamUrl, apiKey: UPSTREAM_SECRET, timeoutMs: 30_000 }],
    routes: [
      { alias: 'echo', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 },
      { alias: 'echo-2', targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 },
    ],
    guardrailPolicies: [],
    prices: [],
    ...overrides,
  };
}

/**
 * The push of `bundle` (any value: tests sign schema-breaking ones too), signed by `signer` over its
 * canonical JSON. `version` defaults to the bundle's own.
 */
export function signedPush(bundle: unknown, signer: TestSigner, version?: number): ConfigPush {
  const bytes = Buffer.from(canonicalJson(bundle), 'utf8');
  const ownVersion = (bundle as { version?: unknown }).version;
  return {
    version: BigInt(version ?? (typeof ownVersion === 'number' ? ownVersion : 0)),
    bundle: bytes,
    signature: sign(null, bytes, signer.privateKey),
    keyId: signer.keyId,
  };
}
