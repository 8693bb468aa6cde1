/**
 * Fastify's JSON parser (secure-json-parse: `__proto__` and `constructor.prototype` keys refused),
 * except that such a key is named as the reason: fastify reports it as invalid JSON, which sent
 * operators looking for a syntax error that is not there. Only a body that failed is parsed again.
 */
import type { FastifyInstance } from 'fastify';
import { zenovaError } from '../errors.js';

type JsonParser = ReturnType<FastifyInstance['getDefaultJsonParser']>;

export const POISONING_KEY_MESSAGE =
  'The request body has a "__proto__" or "constructor.prototype" key, which the control plane does not accept; remove it.';

export function jsonBodyParser(strict: JsonParser): JsonParser {
  return (request, body, done) => {
    // The default parser is synchronous; `void` only marks its declared Promise-or-void result.
    void strict(request, body, (err, value) => {
      if (err instanceof Error && typeof body === 'string' && body.length > 0 && parsesAsPlainJson(body)) {
        done(zenovaError('ZN_ERR_CP_INVALID_REQUEST', POISONING_KEY_MESSAGE), undefined);
        return;
      }
      done(err, value);
    });
  };
}

function parsesAsPlainJson(text: string): boolean {
  try {
    // secure-json-parse skips a leading byte order mark; so must this check.
    JSON.parse(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);
    return true;
  } catch {
    return false;
  }
}
