/**
 * Fastify's JSON parser (secure-json-parse: `__proto__` and `constructor.prototype` keys refused),
 * except that such a key is named as the reason: fastify reports it as invalid JSON, which sent
 * callers and operators looking for a syntax error that is not there. Only a body that failed is
 * parsed a second time. Both HTTP servers use it, each refusing with its own error table's code.
 */
import type { FastifyInstance } from 'fastify';

export type JsonParser = ReturnType<FastifyInstance['getDefaultJsonParser']>;

export function keyNamingJsonParser(strict: JsonParser, poisoningKeyError: () => Error): JsonParser {
  return (request, body, done) => {
    // The default parser is synchronous; `void` only marks its declared Promise-or-void result.
    void strict(request, body, (err, value) => {
      if (err instanceof Error && typeof body === 'string' && body.length > 0 && parsesAsPlainJson(body)) {
        done(poisoningKeyError(), undefined);
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
