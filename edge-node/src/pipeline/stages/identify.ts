// Stage `identify` — a node the control plane deleted serves nobody (ZN_ERR_NODE_DELETED), the
// request's config snapshot must exist (ZN_ERR_NODE_NOT_READY), the body must not nest deeper than
// MAX_BODY_DEPTH (ZN_ERR_BODY_TOO_DEEP), then the API's handler validates the body and sets model,
// stream, max tokens, input texts and estimates.
import { API_HANDLERS } from '../../providers/api-handlers.js';
import type { PipelineContext } from '../context.js';
import { reject } from '../stage.js';
import type { Stage, StageResult } from '../stage.js';

/**
 * Deepest nesting of objects and arrays a body may have. JSON.parse takes any depth, but the
 * recursive steps after it (JSON.stringify of the forwarded body, structuredClone) overflow the
 * stack a few thousand levels down; real requests (tool schemas included) stay far below this.
 */
export const MAX_BODY_DEPTH = 128;

export const identifyStage: Stage = {
  name: 'identify',
  always: false,
  run(ctx: PipelineContext): StageResult {
    // Deleted (NODE_DELETED over the verified control link, kept in credit-leases.sqlite: every
    // replica and a restart alike): its cached config and API keys are the deleted node's, and
    // nothing it records could be delivered. Read from memory (LeaseBook.deletion): no store read.
    if (ctx.deps.credit.nodeDeletion?.() !== undefined) return reject('ZN_ERR_NODE_DELETED');
    if (ctx.config === undefined) return reject('ZN_ERR_NODE_NOT_READY');
    if (nestsDeeperThan(ctx.body, MAX_BODY_DEPTH)) return reject('ZN_ERR_BODY_TOO_DEEP', `The request body nests objects and arrays deeper than ${MAX_BODY_DEPTH} levels.`);
    return API_HANDLERS[ctx.api].identify(ctx);
  },
};

/** Whether `value` has objects or arrays nested more than `max` deep; iterative, so any depth is safe. */
export function nestsDeeperThan(value: unknown, max: number): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const pending: unknown[] = [value];
  const depths: number[] = [1];
  while (pending.length > 0) {
    const node = pending.pop() as object;
    const depth = depths.pop() as number;
    if (depth > max) return true;
    if (Array.isArray(node)) {
      for (const child of node as unknown[]) {
        if (typeof child === 'object' && child !== null) {
          pending.push(child);
          depths.push(depth + 1);
        }
      }
      continue;
    }
    // A parsed JSON body: plain objects, own enumerable keys only; for-in allocates no array.
    for (const key in node) {
      const child = (node as Record<string, unknown>)[key];
      if (typeof child === 'object' && child !== null) {
        pending.push(child);
        depths.push(depth + 1);
      }
    }
  }
  return false;
}
