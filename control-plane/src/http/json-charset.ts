/**
 * JSON bodies are read as UTF-8 only. Fastify picks its JSON parser by media type alone, so a body
 * labelled `application/json; charset=utf-16` (or latin1) would be read as UTF-8 and misread;
 * refuse it as the unsupported media type it is (415), before anything is parsed.
 */
import type { FastifyRequest } from 'fastify';
import { zenovaError } from '../errors.js';

const ACCEPTED_CHARSETS = new Set(['utf-8', 'utf8', 'us-ascii']);

/** The charset a JSON Content-Type names, lower-cased and unquoted; undefined when it names none or is not JSON. */
export function jsonCharset(contentType: string | undefined): string | undefined {
  if (contentType === undefined) return undefined;
  const [mediaType = '', ...params] = contentType.split(';');
  if (mediaType.trim().toLowerCase() !== 'application/json') return undefined;
  for (const param of params) {
    const eq = param.indexOf('=');
    if (eq < 0 || param.slice(0, eq).trim().toLowerCase() !== 'charset') continue;
    return param.slice(eq + 1).trim().replace(/^"(.*)"$/, '$1').toLowerCase();
  }
  return undefined;
}

/** preParsing hook: runs after authentication, so an unauthenticated caller still gets 401 first. */
export async function refuseNonUtf8Json(request: FastifyRequest): Promise<void> {
  // Fastify reads no body on GET and HEAD; their Content-Type means nothing.
  if (request.method === 'GET' || request.method === 'HEAD') return;
  const charset = jsonCharset(request.headers['content-type']);
  if (charset !== undefined && !ACCEPTED_CHARSETS.has(charset)) {
    throw zenovaError(
      'ZN_ERR_CP_UNSUPPORTED_MEDIA_TYPE',
      'JSON bodies must be UTF-8: send Content-Type: application/json with charset=utf-8 or no charset.',
    );
  }
}
