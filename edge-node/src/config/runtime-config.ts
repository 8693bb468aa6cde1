/**
 * The one config type the serving code reads: upstreams, routes, API keys and accounts, already
 * indexed for the hot path. Built either from the local `--config` file (stand-alone mode) or from
 * a verified signed bundle (enrolled mode); nothing downstream knows which. Values are immutable:
 * a new config is a new object, swapped in whole (config-holder.ts).
 */
import type { ConfigBundle } from '../../../proto/src/index.js';
import { DEFAULT_MAX_BODY_BYTES, DEFAULT_UPSTREAM_TIMEOUT_MS, maxBodyBytes } from './local-config.js';
import type { LocalConfig } from './local-config.js';

export type UpstreamKind = 'openai' | 'anthropic' | 'openai-compatible';

export interface RuntimeUpstream {
  readonly name: string;
  readonly kind: UpstreamKind;
  /** The provider's API base, e.g. https://api.openai.com/v1. */
  readonly baseUrl: string;
  /** The provider secret; never logged. */
  readonly apiKey: string | undefined;
  readonly timeoutMs: number;
}

/** A servable alias: where its calls go. */
export interface RuntimeRoute {
  readonly alias: string;
  readonly upstream: RuntimeUpstream;
  readonly upstreamModel: string;
  /** The tighter of the route's and the upstream's timeouts. */
  readonly timeoutMs: number;
}

export interface RuntimeApiKey {
  /** Safe to log, unlike the key. */
  readonly id: string;
  readonly name: string | undefined;
  /** null for keys from a local file, which has no accounts. */
  readonly accountId: string | null;
  readonly status: 'active' | 'revoked';
  /** Unix ms; null = never expires. */
  readonly expiresAtMs: number | null;
  /** null = every alias the node routes. */
  readonly allowedModels: ReadonlySet<string> | null;
}

export interface RuntimeAccount {
  readonly id: string;
  readonly name: string;
  readonly status: 'active' | 'suspended';
}

export interface RuntimeConfig {
  readonly source: 'local-file' | 'bundle';
  /** The bundle's version; null for a local file. */
  readonly version: number | null;
  readonly nodeName: string | null;
  readonly upstreams: ReadonlyMap<string, RuntimeUpstream>;
  /** Servable aliases. */
  readonly routes: ReadonlyMap<string, RuntimeRoute>;
  /** Aliases the config names but this node cannot serve, with the reason (told to callers). */
  readonly unservableRoutes: ReadonlyMap<string, string>;
  /** By lowercase hex SHA-256 of the key; null = callers need no key (a local file without apiKeys). */
  readonly apiKeys: ReadonlyMap<string, RuntimeApiKey> | null;
  readonly accounts: ReadonlyMap<string, RuntimeAccount>;
  readonly maxBodyBytes: number;
}

/** A bundle that verified but cannot be served as a whole (duplicates the control plane should have refused). */
export class RuntimeConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RuntimeConfigError';
  }
}

/** The upstream kinds this node forwards today; anthropic arrives with the request pipeline (issue 5). */
const FORWARDED_KINDS: ReadonlySet<UpstreamKind> = new Set(['openai', 'openai-compatible']);

/** Items by key; a repeated key is an error naming `nameOf` of the item (never a key hash). */
function uniqueMap<T>(items: readonly T[], keyOf: (item: T) => string, what: string, nameOf: (item: T) => string = keyOf): Map<string, T> {
  const map = new Map<string, T>();
  for (const item of items) {
    const key = keyOf(item);
    if (map.has(key)) throw new RuntimeConfigError(`duplicate ${what} (${JSON.stringify(nameOf(item).slice(0, 128))})`);
    map.set(key, item);
  }
  return map;
}

export function fromLocalConfig(config: LocalConfig): RuntimeConfig {
  const upstreams = new Map<string, RuntimeUpstream>(
    config.upstreams.map((u) => [
      u.name,
      { name: u.name, kind: u.kind, baseUrl: u.baseUrl, apiKey: u.apiKey, timeoutMs: u.timeoutMs ?? DEFAULT_UPSTREAM_TIMEOUT_MS },
    ]),
  );
  const routes = new Map<string, RuntimeRoute>();
  for (const model of config.models) {
    // The local schema already refuses unknown upstreams; the guard keeps the types honest.
    const upstream = upstreams.get(model.upstream);
    if (upstream !== undefined) routes.set(model.id, { alias: model.id, upstream, upstreamModel: model.upstreamModel, timeoutMs: upstream.timeoutMs });
  }
  const apiKeys =
    config.apiKeys === undefined
      ? null
      : new Map<string, RuntimeApiKey>(
          config.apiKeys.map((k) => [
            k.sha256.toLowerCase(),
            { id: k.id, name: k.name, accountId: null, status: 'active', expiresAtMs: null, allowedModels: null },
          ]),
        );
  return {
    source: 'local-file',
    version: null,
    nodeName: config.node?.name ?? null,
    upstreams,
    routes,
    unservableRoutes: new Map(),
    apiKeys,
    accounts: new Map(),
    maxBodyBytes: maxBodyBytes(config),
  };
}

/**
 * A verified bundle as the node serves it. An alias is served by its first target with a weight
 * above 0 (weighted choice, fallbacks and retries come with the request pipeline); aliases that
 * cannot be served are kept apart with the reason rather than failing the whole bundle.
 */
export function fromBundle(bundle: ConfigBundle): RuntimeConfig {
  const upstreams = uniqueMap(
    bundle.upstreams.map((u): RuntimeUpstream => ({ name: u.name, kind: u.kind, baseUrl: u.baseUrl, apiKey: u.apiKey ?? undefined, timeoutMs: u.timeoutMs })),
    (u) => u.name,
    'upstream name',
  );
  const routes = new Map<string, RuntimeRoute>();
  const unservableRoutes = new Map<string, string>();
  for (const route of uniqueMap(bundle.routes, (r) => r.alias, 'route alias').values()) {
    const target = route.targets.find((candidate) => candidate.weight > 0);
    const upstream = target === undefined ? undefined : upstreams.get(target.upstream);
    if (target === undefined) {
      unservableRoutes.set(route.alias, 'it has no target with a weight above 0');
    } else if (upstream === undefined) {
      unservableRoutes.set(route.alias, `its upstream "${target.upstream}" is not in this node's config`);
    } else if (!FORWARDED_KINDS.has(upstream.kind)) {
      unservableRoutes.set(route.alias, `its upstream is of kind "${upstream.kind}", which this node does not forward yet`);
    } else {
      routes.set(route.alias, { alias: route.alias, upstream, upstreamModel: target.model, timeoutMs: Math.min(route.timeoutMs, upstream.timeoutMs) });
    }
  }
  const accounts = uniqueMap(
    bundle.accounts.map((a): RuntimeAccount => ({ id: a.id, name: a.name, status: a.status })),
    (a) => a.id,
    'account id',
  );
  const apiKeys = uniqueMap(bundle.apiKeys, (k) => k.sha256, 'API key hash', (k) => `key ${k.id}`);
  const runtimeKeys = new Map<string, RuntimeApiKey>();
  for (const [hash, k] of apiKeys) {
    runtimeKeys.set(hash, {
      id: k.id,
      name: k.name,
      accountId: k.accountId,
      status: k.status,
      expiresAtMs: k.expiresAt === null ? null : Date.parse(k.expiresAt),
      allowedModels: k.allowedModels === null ? null : new Set(k.allowedModels),
    });
  }
  return {
    source: 'bundle',
    version: bundle.version,
    nodeName: bundle.nodeName,
    upstreams,
    routes,
    unservableRoutes,
    apiKeys: runtimeKeys,
    accounts,
    maxBodyBytes: DEFAULT_MAX_BODY_BYTES,
  };
}
