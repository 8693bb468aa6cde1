/**
 * Turns every failure into an entry of the error table: ZenovaErrors as they are, fastify's own
 * client errors (bad JSON, body too large, …) into their codes, an unreachable database into a
 * retryable 503, and anything else into ZN_ERR_CP_INTERNAL — logged with its stack, answered
 * without internals. Every body has `param`, as OpenAI's and the node's do: the first offending
 * field of a schema refusal, else null.
 */
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { fieldPath, shownFieldName } from '../config/config-fields.js';
import { consoleSecurityHeaders } from '../console/console-assets.routes.js';
import { isDatabaseUnavailable } from '../db/connection-errors.js';
import { ZenovaError, zenovaError } from '../errors.js';
import { REQUEST_ID_HEADER } from './request-id.js';

const MAX_PATH_IN_MESSAGE = 200;

/**
 * The router's limit on one path segment (fastify's maxParamLength). Names and ids are at most 128
 * characters, so this leaves room for a name sent %-encoded (an alias's '/' as %2F); the route's
 * schema then applies the name rule itself.
 */
export const MAX_PATH_PARAM_CHARS = 512;

function fastifyCode(err: unknown): string | undefined {
  const code = (err as Partial<FastifyError> | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

function statusOf(err: unknown): number | undefined {
  const status = (err as Partial<FastifyError> | null)?.statusCode;
  return typeof status === 'number' ? status : undefined;
}

const KIB = 1024;
const MIB = 1024 * KIB;

/** 1 MiB, 128 KiB, 8 KiB, 1000 bytes: a body limit as the docs state it. */
export function formatByteLimit(bytes: number): string {
  if (bytes >= MIB && bytes % MIB === 0) return `${bytes / MIB} MiB`;
  if (bytes >= KIB && bytes % KIB === 0) return `${bytes / KIB} KiB`;
  return `${bytes} bytes`;
}

/** `bodyLimit`: the limit of the route the error came from, so a 413 states the limit that applied. */
export function toZenovaError(err: unknown, bodyLimit?: number): ZenovaError {
  if (err instanceof ZenovaError) return err;
  if (isDatabaseUnavailable(err)) return zenovaError('ZN_ERR_CP_DATABASE_UNAVAILABLE', undefined, { cause: err });
  const code = fastifyCode(err);
  switch (code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return zenovaError(
        'ZN_ERR_CP_BODY_TOO_LARGE',
        bodyLimit === undefined ? undefined : `The request body is larger than this route's limit of ${formatByteLimit(bodyLimit)}; send less.`,
      );
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return zenovaError('ZN_ERR_CP_UNSUPPORTED_MEDIA_TYPE');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return zenovaError('ZN_ERR_CP_INVALID_REQUEST', 'The request body is not valid JSON.');
    default:
      break;
  }
  const status = statusOf(err);
  if (status !== undefined && status >= 400 && status < 500) {
    // Fastify's own client-error messages are fixed texts, safe to pass on; others are not ours to echo.
    const message = code?.startsWith('FST_') && err instanceof Error ? err.message : undefined;
    return zenovaError('ZN_ERR_CP_INVALID_REQUEST', message, { cause: err });
  }
  return zenovaError('ZN_ERR_CP_INTERNAL', undefined, { cause: err });
}

/**
 * The body's `param`: for a schema refusal (a ZenovaError whose cause is the zod error; routes'
 * zod schemas and parseConfigInput throw them so), the first issue's field as its message names it
 * (`name`, `targets[0].weight`, a query's `limit`; an unknown field's own name); else null. A field
 * name that could be a pasted secret is never echoed (shownFieldName): it names its object instead.
 */
export function paramOf(error: ZenovaError): string | null {
  if (!(error.cause instanceof z.ZodError)) return null;
  const first = error.cause.issues[0];
  if (first === undefined) return null;
  const unknownKey = first.code === 'unrecognized_keys' ? first.keys[0] : undefined;
  const path = unknownKey !== undefined && shownFieldName(unknownKey) === unknownKey ? [...first.path, unknownKey] : first.path;
  return path.length === 0 ? null : fieldPath(path);
}

export function errorHandler(err: unknown, request: FastifyRequest, reply: FastifyReply): void {
  const error = toZenovaError(err, request.routeOptions.bodyLimit);
  if (error.code === 'ZN_ERR_CP_INTERNAL') {
    request.log.error({ err }, 'request failed with an internal error');
  } else if (error.status >= 500) {
    request.log.warn({ err, code: error.code }, 'request failed');
  } else {
    request.log.info({ code: error.code, reason: error.message }, 'request rejected');
  }
  if (error.retryable && error.status === 503) void reply.header('retry-after', '1');
  // RFC 6750: tell the client which scheme to use.
  if (error.code === 'ZN_ERR_CP_UNAUTHENTICATED') void reply.header('www-authenticate', 'Bearer realm="zenova-admin"');
  void reply.status(error.status).send(error.toBody(paramOf(error)));
}

export function notFoundHandler(request: FastifyRequest, reply: FastifyReply): void {
  // The path only: a query string may carry a secret.
  const path = request.url.split('?')[0] ?? '';
  const shown = path.length > MAX_PATH_IN_MESSAGE ? `${path.slice(0, MAX_PATH_IN_MESSAGE)}…` : path;
  const error = zenovaError('ZN_ERR_CP_NOT_FOUND', `No route for ${request.method} ${shown}.`);
  void reply.status(error.status).send(error.toBody());
}

/**
 * Fastify's `frameworkErrors`: the router's own refusals (a path that cannot be %-decoded, a path
 * segment over MAX_PATH_PARAM_CHARS) happen before routing, so no hook ran and the error handler is
 * skipped. Answer them as every other error: our body and code, x-request-id, and no echo of the path.
 */
export function frameworkErrorHandler(err: unknown, request: FastifyRequest, reply: FastifyReply): void {
  let error: ZenovaError;
  switch (fastifyCode(err)) {
    case 'FST_ERR_BAD_URL':
      error = zenovaError('ZN_ERR_CP_INVALID_REQUEST', 'The URL path cannot be decoded (a malformed %-escape or invalid UTF-8); percent-encode the path as UTF-8.');
      break;
    case 'FST_ERR_MAX_PARAM_LENGTH':
      error = zenovaError('ZN_ERR_CP_INVALID_REQUEST', `A path segment is longer than ${MAX_PATH_PARAM_CHARS} characters; no name or id is that long.`);
      break;
    default:
      error = toZenovaError(err);
  }
  void reply.header(REQUEST_ID_HEADER, request.id);
  // The router refuses before any onRequest hook (noStore, the console's headers) ran.
  void reply.header('cache-control', 'no-store');
  consoleSecurityHeaders(request, reply);
  if (error.code === 'ZN_ERR_CP_INTERNAL') request.log.error({ err }, 'request failed in the router');
  else request.log.info({ code: error.code, reason: error.message }, 'request rejected');
  void reply.status(error.status).send(error.toBody());
}
