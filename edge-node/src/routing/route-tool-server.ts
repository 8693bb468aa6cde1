/**
 * The route stage's work for the tools surface: /mcp/{server} → the tool server of that name in the
 * node's config (ctx.toolServer). The key's allowed tool servers are checked first (so a restricted
 * key learns nothing about other servers, as with allowedModels), then existence. Both run earlier
 * too, in the surface stage (`checkToolServerAccess`), so a forbidden or misspelt server name is
 * refused before the rate limits count it.
 */
import type { ToolServer } from '../../../proto/src/index.js';
import type { PipelineContext } from '../pipeline/context.js';
import { reject } from '../pipeline/stage.js';
import type { Rejection, StageResult } from '../pipeline/stage.js';

/** The names the config accepts; only such a name is quoted back to the caller. */
const SERVER_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** What the tool server check needs of a key: null = every tool server the node has. */
export interface ToolServerPermissions {
  readonly allowedToolServers: ReadonlySet<string> | null;
}

/** The {server} path segment the caller chose. */
export function toolServerName(ctx: PipelineContext): string {
  return ctx.http.params.server ?? '';
}

/** No key (a stand-alone node without keys) or no list: every tool server. */
export function mayUseToolServer(key: ToolServerPermissions | undefined, name: string): boolean {
  return key?.allowedToolServers == null || key.allowedToolServers.has(name);
}

/** The tool server the request names, or ZN_ERR_TOOL_SERVER_NOT_ALLOWED / ZN_ERR_TOOL_SERVER_NOT_FOUND. */
export function toolServerFor(ctx: PipelineContext): ToolServer | Rejection {
  const name = toolServerName(ctx);
  const quotable = SERVER_NAME.test(name);
  if (!mayUseToolServer(ctx.key, name)) {
    return reject('ZN_ERR_TOOL_SERVER_NOT_ALLOWED', quotable ? `This API key may not use the tool server "${name}".` : undefined);
  }
  const server = ctx.config?.toolServers.get(name);
  if (server !== undefined) return server;
  return reject('ZN_ERR_TOOL_SERVER_NOT_FOUND', quotable ? `No tool server "${name}" on this node.` : undefined);
}

/**
 * Before the rate limits: the key may use the tool server and it exists. A forbidden or unknown one
 * gets its 403/404 and spends none of the key's or account's quota nor a concurrency slot (a 429
 * would hide the refusal and invite retries).
 */
export function checkToolServerAccess(ctx: PipelineContext): StageResult {
  if (ctx.config === undefined) return undefined;
  const server = toolServerFor(ctx);
  return 'error' in server ? server : undefined;
}
