/**
 * The route stage's work for the tools surface: /mcp/{server} → the tool server of that name in the
 * node's config (ctx.toolServer). Keys carry no tool-server allow-list (their allowedModels name
 * models only), so existence is the one check. It runs earlier too, in the surface stage
 * (`checkToolServerAccess`), so a misspelt server name is refused before the rate limits count it.
 */
import type { ToolServer } from '../../../proto/src/index.js';
import type { PipelineContext } from '../pipeline/context.js';
import { reject } from '../pipeline/stage.js';
import type { Rejection, StageResult } from '../pipeline/stage.js';

/** The names the config accepts; only such a name is quoted back to the caller. */
const SERVER_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** The {server} path segment the caller chose. */
export function toolServerName(ctx: PipelineContext): string {
  return ctx.http.params.server ?? '';
}

/** The tool server the request names, or ZN_ERR_TOOL_SERVER_NOT_FOUND. */
export function toolServerFor(ctx: PipelineContext): ToolServer | Rejection {
  const name = toolServerName(ctx);
  const server = ctx.config?.toolServers.get(name);
  if (server !== undefined) return server;
  return reject('ZN_ERR_TOOL_SERVER_NOT_FOUND', SERVER_NAME.test(name) ? `No tool server "${name}" on this node.` : undefined);
}

/**
 * Before the rate limits: the tool server exists. An unknown one gets its 404 and spends none of the
 * key's or account's quota nor a concurrency slot (a 429 would hide the typo and invite retries).
 */
export function checkToolServerAccess(ctx: PipelineContext): StageResult {
  if (ctx.config === undefined) return undefined;
  const server = toolServerFor(ctx);
  return 'error' in server ? server : undefined;
}
