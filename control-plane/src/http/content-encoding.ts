/**
 * Bodies are taken uncompressed only. Fastify does not decode Content-Encoding, so a gzip body
 * would be parsed as if it were plain JSON (a confusing 400 at best); refuse it as the unsupported
 * media type it is (415) before anything is read. Not decoding also means no decompression bomb.
 */
import type { FastifyRequest } from 'fastify';
import { zenovaError } from '../errors.js';

/** preParsing hook, beside refuseNonUtf8Json (json-charset.ts): after authentication, before the body. */
export async function refuseEncodedBody(request: FastifyRequest): Promise<void> {
  const encoding = request.headers['content-encoding'];
  if (encoding === undefined) return;
  const value = encoding.trim().toLowerCase();
  if (value === '' || value === 'identity') return;
  throw zenovaError('ZN_ERR_CP_UNSUPPORTED_MEDIA_TYPE', `Content-Encoding ${JSON.stringify(encoding.slice(0, 40))} is not supported: send the body uncompressed.`);
}
