/**
 * The one config type the serving code reads: upstreams, routes, API keys and accounts, already
 * indexed for the hot path. Built either from the local `--config` file (stand-alone mode) or from
 * a verified signed bundle (enrolled mode); nothing downstream knows which. Values are immutable:
 * a new config is a new object, swapped in whole (config-holder.ts).
 */
import type { ConfigBundle } from '../../../proto/src/index.js';
import type { GuardrailPolicy, Price, RateLimits, SpoolSettings, Surface, ToolServer } from '../../../proto/src/index.js';
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

/** One place an alias's calls may go. */
export interface RuntimeTarget {
  readonly upstream: RuntimeUpstream;
  readonly upstreamModel: string;
  /** Relative share among `targets`; fallbacks carry 0. */
  readonly weight: number;
}

/** A servable alias: where its calls go. */
export interface RuntimeRoute {
  readonly alias: string;
  /** The first target with a weight above 0 (kept for code that needs one answer). */
  readonly upstream: RuntimeUpstream;
  readonly upstreamModel: string;
  /**
   * The route's own per-attempt timeout (a local-file model has none: its upstream's). Each attempt
   * takes the smaller of this and its own upstream's (forward-plan.ts); folding the first target's
   * upstream in here capped every later target and fallback at that upstream's timeout.
   */
  readonly timeoutMs: number;
  /** Weighted targets whose upstream this node has (weight > 0 only). */
  readonly targets: readonly RuntimeTarget[];
  /** Tried in order after the chosen target failed (connect error, 5xx, timeout). */
  readonly fallbacks: readonly RuntimeTarget[];
  /** Extra attempts per target, only while no byte was sent to the caller. */
  readonly retries: number;
  /** The API family of the route's upstreams: 'anthropic' routes serve /v1/messages, the others the OpenAI APIs. */
  readonly family: 'openai' | 'anthropic';
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
  /** null = every tool server the node has (/mcp/{server}). */
  readonly allowedToolServers: ReadonlySet<string> | null;
  /** The key's own limits (empty = none). */
  readonly limits: RateLimits;
  /** The guardrail policy applied to this key's calls; null = none. */
  readonly guardrailPolicyId: string | null;
}

export interface RuntimeAccount {
  readonly id: string;
  readonly name: string;
  readonly status: 'active' | 'suspended';
  /** Limits shared by every key of the account (empty = none). */
  readonly limits: RateLimits;
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
  /** Surfaces this node serves: 'model' (/v1/...) and 'tools' (/mcp/{server}). */
  readonly surfaces: ReadonlySet<Surface>;
  /** The node's spool quota and full policy (null for a local file: the node's own defaults apply). */
  readonly spool: SpoolSettings | null;
  readonly guardrailPolicies: ReadonlyMap<string, GuardrailPolicy>;
  /** By route alias; an alias without a price costs 0 (and the record says it was unpriced). */
  readonly prices: ReadonlyMap<string, Price>;
  /** MCP tool servers by name. */
  readonly toolServers: ReadonlyMap<string, ToolServer>;
}

/** A bundle that verified but cannot be served as a whole (duplicates the control plane should have refused). */
export class RuntimeConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RuntimeConfigError';
  }
}

function familyOf(kind: UpstreamKind): RuntimeRoute['family'] {
  return kind === 'anthropic' ? 'anthropic' : 'openai';
}

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
    if (upstream === undefined) continue;
    const target: RuntimeTarget = { upstream, upstreamModel: model.upstreamModel, weight: 1 };
    routes.set(model.id, {
      alias: model.id,
      upstream,
      upstreamModel: model.upstreamModel,
      timeoutMs: upstream.timeoutMs,
      targets: [target],
      fallbacks: [],
      retries: 0,
      family: familyOf(upstream.kind),
    });
  }
  const apiKeys =
    config.apiKeys === undefined
      ? null
      : new Map<string, RuntimeApiKey>(
          config.apiKeys.map((k) => [
            k.sha256.toLowerCase(),
            { id: k.id, name: k.name, accountId: null, status: 'active', expiresAtMs: null, allowedModels: null, allowedToolServers: null, limits: {}, guardrailPolicyId: null },
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
    surfaces: new Set<Surface>(['model']),
    spool: null,
    guardrailPolicies: new Map(),
    prices: new Map(),
    toolServers: new Map(),
  };
}

/**
 * A verified bundle as the node serves it. Targets and fallbacks whose upstream the bundle lacks
 * are dropped; an alias left without a target with a weight above 0, or whose upstreams mix the
 * OpenAI and Anthropic families, is kept apart with the reason rather than failing the whole bundle.
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
    const resolve = (t: { upstream: string; model: string; weight?: number }): RuntimeTarget | undefined => {
      const upstream = upstreams.get(t.upstream);
      return upstream === undefined ? undefined : { upstream, upstreamModel: t.model, weight: t.weight ?? 0 };
    };
    const weighted = route.targets.filter((t) => t.weight > 0);
    const targets = weighted.map(resolve).filter((t): t is RuntimeTarget => t !== undefined);
    const fallbacks = route.fallbacks.map(resolve).filter((t): t is RuntimeTarget => t !== undefined);
    const first = targets[0];
    const families = new Set([...targets, ...fallbacks].map((t) => familyOf(t.upstream.kind)));
    if (weighted.length === 0) {
      unservableRoutes.set(route.alias, 'it has no target with a weight above 0');
    } else if (first === undefined) {
      unservableRoutes.set(route.alias, `its upstream "${weighted[0]!.upstream}" is not in this node's config`);
    } else if (families.size > 1) {
      unservableRoutes.set(route.alias, 'its targets mix OpenAI-compatible and Anthropic upstreams');
    } else {
      routes.set(route.alias, {
        alias: route.alias,
        upstream: first.upstream,
        upstreamModel: first.upstreamModel,
        timeoutMs: route.timeoutMs,
        targets,
        fallbacks,
        retries: route.retries,
        family: familyOf(first.upstream.kind),
      });
    }
  }
  const accounts = uniqueMap(
    bundle.accounts.map((a): RuntimeAccount => ({ id: a.id, name: a.name, status: a.status, limits: a.limits })),
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
      allowedToolServers: k.allowedToolServers == null ? null : new Set(k.allowedToolServers),
      limits: k.limits,
      guardrailPolicyId: k.guardrailPolicyId,
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
    surfaces: new Set(bundle.node.surfaces),
    spool: bundle.node.spool,
    guardrailPolicies: uniqueMap(bundle.guardrailPolicies, (p) => p.id, 'guardrail policy id'),
    prices: uniqueMap(bundle.prices, (p) => p.model, 'price model'),
    toolServers: uniqueMap(bundle.toolServers, (t) => t.name, 'tool server name'),
  };
}
