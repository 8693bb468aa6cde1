// Model alias → route, within the request's config snapshot and what the caller's key may use.
import type { RuntimeConfig, RuntimeRoute } from '../config/runtime-config.js';
import { zenovaError } from '../errors.js';

const MAX_ECHOED_ALIAS = 128;

/** What the router needs of a key: null = every alias the node routes. */
export interface ModelPermissions {
  readonly allowedModels: ReadonlySet<string> | null;
}

export function shownAlias(alias: string): string {
  return JSON.stringify(alias.length > MAX_ECHOED_ALIAS ? `${alias.slice(0, MAX_ECHOED_ALIAS)}…` : alias);
}

export function mayUse(key: ModelPermissions | undefined, alias: string): boolean {
  return key?.allowedModels == null || key.allowedModels.has(alias);
}

/** Where a caller of each API family finds the aliases its key may use (models-api-family.ts). */
const MODEL_LIST_OF: Readonly<Record<RuntimeRoute['family'], string>> = {
  openai: 'GET /v1/models lists the models this key may use',
  anthropic: "GET /v1/models with an anthropic-version header (the Anthropic SDK's models.list()) lists the models this key may use on /v1/messages",
};

/**
 * The route for `alias`, asked for through an API of `family`. Throws ZN_ERR_MODEL_NOT_ALLOWED
 * when the key may not use it (checked first, so a restricted key learns nothing about other
 * aliases), ZN_ERR_MODEL_NOT_FOUND when the node does not serve it (saying where that family's
 * callers find the aliases they may use).
 */
export function resolveRoute(config: RuntimeConfig, alias: string, key: ModelPermissions | undefined, family: RuntimeRoute['family']): RuntimeRoute {
  if (!mayUse(key, alias)) throw zenovaError('ZN_ERR_MODEL_NOT_ALLOWED', `This API key may not use the model ${shownAlias(alias)}.`);
  const route = config.routes.get(alias);
  if (route !== undefined) return route;
  const why = config.unservableRoutes.get(alias);
  if (why !== undefined) throw zenovaError('ZN_ERR_MODEL_NOT_FOUND', `The model ${shownAlias(alias)} cannot be served by this node: ${why}.`);
  throw zenovaError('ZN_ERR_MODEL_NOT_FOUND', `The model ${shownAlias(alias)} does not exist on this node; ${MODEL_LIST_OF[family]}.`);
}

/** The servable aliases the key may use, in config order. */
export function listRoutes(config: RuntimeConfig, key: ModelPermissions | undefined): RuntimeRoute[] {
  return [...config.routes.values()].filter((route) => mayUse(key, route.alias));
}
