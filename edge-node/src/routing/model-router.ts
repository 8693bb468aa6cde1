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

/**
 * The route for `alias`. Throws ZN_ERR_MODEL_NOT_ALLOWED when the key may not use it (checked
 * first, so a restricted key learns nothing about other aliases), ZN_ERR_MODEL_NOT_FOUND when the
 * node does not serve it.
 */
export function resolveRoute(config: RuntimeConfig, alias: string, key: ModelPermissions | undefined): RuntimeRoute {
  if (!mayUse(key, alias)) throw zenovaError('ZN_ERR_MODEL_NOT_ALLOWED', `This API key may not use the model ${shownAlias(alias)}.`);
  const route = config.routes.get(alias);
  if (route !== undefined) return route;
  const why = config.unservableRoutes.get(alias);
  if (why !== undefined) throw zenovaError('ZN_ERR_MODEL_NOT_FOUND', `The model ${shownAlias(alias)} cannot be served by this node: ${why}.`);
  throw zenovaError('ZN_ERR_MODEL_NOT_FOUND', `The model ${shownAlias(alias)} does not exist on this node.`);
}

/** The servable aliases the key may use, in config order. */
export function listRoutes(config: RuntimeConfig, key: ModelPermissions | undefined): RuntimeRoute[] {
  return [...config.routes.values()].filter((route) => mayUse(key, route.alias));
}
