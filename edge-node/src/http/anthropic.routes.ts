// Anthropic's caller surface: POST /v1/messages (JSON and SSE), through the request pipeline.
// Every response under /v1/messages, errors raised before the pipeline included, carries
// `request-id` and errors in Anthropic's shape (app.ts asks `wantsAnthropicErrors`, which says
// the same of GET /v1/models when an Anthropic SDK calls it).
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { ZenovaError } from '../errors.js';
import type { PipelineDeps } from '../pipeline/deps.js';
import { runPipeline } from '../pipeline/run-pipeline.js';
import { anthropicErrorBodyOf } from '../providers/anthropic/anthropic-errors.js';
import { withoutExtraLeadingSlashes } from './not-found.js';

const MESSAGES_PATH = '/v1/messages';
const DOUBLED_MESSAGES_PATH = `/v1${MESSAGES_PATH}`;
const MODELS_PATH = '/v1/models';
const DOUBLED_MODELS_PATH = `/v1${MODELS_PATH}`;

/** Anthropic's SDKs read the request id from `request-id` (APIError.requestID, _request_id). */
export const ANTHROPIC_REQUEST_ID_HEADER = 'request-id';

/**
 * `/v1/messages`, `/v1/messages?…` or `/v1/messages/…`: paths Anthropic's SDKs call; and the same
 * under `/v1/v1`, which they call when given a Base URL ending in /v1 (its 404 says to drop it,
 * not-found.ts), so that answer too reaches them in their shape.
 */
export function isAnthropicPath(url: string): boolean {
  // `//v1/messages` (a Base URL ending in /) too: its 404 says to drop the /, in Anthropic's shape.
  const path = withoutExtraLeadingSlashes(url) ?? url;
  return isUnder(path, MESSAGES_PATH) || isUnder(path, DOUBLED_MESSAGES_PATH);
}

/**
 * Whether an answer carries Anthropic's `request-id` (its SDKs read it into `requestID`): on its
 * paths, and on any request an Anthropic SDK sent (`anthropic-version`, which it sends on every
 * call), such as GET /v1/models answered in its shape (models-api-family.ts).
 */
export function wantsAnthropicRequestId(url: string, headers: IncomingHttpHeaders): boolean {
  return headers['anthropic-version'] !== undefined || isAnthropicPath(url);
}

function isUnder(url: string, path: string): boolean {
  if (!url.startsWith(path)) return false;
  const next = url.charCodeAt(path.length);
  return Number.isNaN(next) || next === 0x3f /* ? */ || next === 0x2f /* / */;
}

/**
 * Whether errors to a request go out in Anthropic's shape: on its paths, and on the models paths
 * when an Anthropic SDK asks (`anthropic-version`, as models-api-family.ts picks the answer's
 * shape), so a refusal before the pipeline (an undecodable path, a Content-Encoding, a doubled
 * /v1) reaches its `models.list()` as the pipeline's own refusals do. Other paths keep OpenAI's
 * shape whatever the headers: their pipeline answers in it.
 */
export function wantsAnthropicErrors(url: string, headers: IncomingHttpHeaders | undefined): boolean {
  if (isAnthropicPath(url)) return true;
  if (headers?.['anthropic-version'] === undefined) return false;
  const path = withoutExtraLeadingSlashes(url) ?? url;
  return isUnder(path, MODELS_PATH) || isUnder(path, DOUBLED_MODELS_PATH);
}

/** The error body for a request to `url`: Anthropic's shape where wantsAnthropicErrors says so, OpenAI's elsewhere. */
export function errorBodyFor(url: string, failure: ZenovaError, headers?: IncomingHttpHeaders): unknown {
  return wantsAnthropicErrors(url, headers) ? anthropicErrorBodyOf(failure) : failure.toBody();
}

export function registerAnthropicRoutes(app: FastifyInstance, deps: PipelineDeps): void {
  app.post(MESSAGES_PATH, (request, reply) => runPipeline(request, reply, deps, { api: 'messages', surface: 'model' }));
}
