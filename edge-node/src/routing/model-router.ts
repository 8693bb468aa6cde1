// Model alias → upstream and the upstream's own model name. Weighted targets and fallback come later.
import type { ModelConfig } from '../config/local-config.js';
import { zenovaError } from '../errors.js';

export interface ModelRouter {
  /** The route for an alias; throws ZN_ERR_MODEL_NOT_FOUND for an alias this node does not serve. */
  resolve(alias: string): ModelConfig;
  list(): readonly ModelConfig[];
}

const MAX_ECHOED_ALIAS = 128;

export function createModelRouter(models: readonly ModelConfig[]): ModelRouter {
  const byAlias = new Map(models.map((m) => [m.id, m]));
  return {
    resolve(alias) {
      const model = byAlias.get(alias);
      if (model === undefined) {
        const shown = alias.length > MAX_ECHOED_ALIAS ? `${alias.slice(0, MAX_ECHOED_ALIAS)}…` : alias;
        throw zenovaError('ZN_ERR_MODEL_NOT_FOUND', `The model ${JSON.stringify(shown)} does not exist on this node.`);
      }
      return model;
    },
    list: () => models,
  };
}
