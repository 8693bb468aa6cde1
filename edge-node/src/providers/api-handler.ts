/**
 * One caller API as the pipeline serves it (providers as data: one folder per provider family).
 * The identify, route and forward stages look up `ctx.api` in api-handlers.ts and call the
 * handler's part; everything else in the pipeline is the same for every API.
 */
import type { ZenovaError } from '../errors.js';
import type { ApiKind, PipelineContext, Surface } from '../pipeline/context.js';
import type { StageResult } from '../pipeline/stage.js';

export interface ApiHandler {
  readonly api: ApiKind;
  readonly surface: Surface;
  /**
   * identify: validate ctx.body against the API's schema (ZN_ERR_INVALID_REQUEST naming the field)
   * and set ctx.forwardBody, model, stream, maxOutputTokens, estimatedInputTokens, inputTexts.
   */
  identify(ctx: PipelineContext): StageResult;
  /**
   * route: decide where the call goes (ctx.route + ctx.plan for models, ctx.toolServer for MCP), with
   * the key's allowed models or tool servers; ZN_ERR_MODEL_NOT_ALLOWED / _NOT_FOUND / _WRONG_API,
   * ZN_ERR_TOOL_SERVER_NOT_ALLOWED / _NOT_FOUND.
   */
  route(ctx: PipelineContext): StageResult;
  /**
   * forward: call the upstream (fallbacks and retries while nothing was sent to the caller) and set
   * ctx.reply, ctx.served, ctx.attempts, upstream timings; usage into ctx.upstreamUsage as seen.
   * Returns a rejection when no target answered (the last failure's code).
   */
  forward(ctx: PipelineContext): Promise<StageResult>;
  /**
   * The error body in this API's own shape (Anthropic's {type:'error', error:{type, message}}), so
   * its official SDK reads it; absent = the node's OpenAI-style body (ZenovaError.toBody()). `ctx`
   * for an API whose shape depends on the request (the models API: its `anthropic-version`).
   */
  errorBody?(error: ZenovaError, ctx: PipelineContext): unknown;
}
