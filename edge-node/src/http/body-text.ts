/**
 * The text of a JSON request body as it arrived, kept for the routes that relay the body as sent
 * (route config `keepBodyText`: MCP). A parsed and re-serialised copy is not the caller's request:
 * it rounds integers past 2^53 (a 64-bit id then names another record) and rewrites numbers' form.
 * The text is the one the JSON parser read (UTF-8 decoded), so what is relayed is what was checked.
 */
import type { FastifyRequest } from 'fastify';
import { LONG_INTEGER_HINT } from '../providers/json-string-slots.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route relays its JSON body as received: the app's parser keeps its text (bodyTextOf). */
    keepBodyText?: boolean;
  }
}

const bodyTexts = new WeakMap<FastifyRequest, string>();

/**
 * Keeps `text`, the body `request` was parsed from, when its route asks for it, or when it may hold
 * an integer JSON.parse rounds (16 digits or more): the model routes put those back into what they
 * send (withLongIntegersOf), as fields they do not read go on as sent.
 */
export function keepBodyText(request: FastifyRequest, text: string): void {
  if (request.routeOptions.config.keepBodyText === true || LONG_INTEGER_HINT.test(text)) bodyTexts.set(request, text);
}

/** The body's text kept by keepBodyText; undefined for bodies it did not keep and bodies that are not JSON. */
export function bodyTextOf(request: FastifyRequest): string | undefined {
  return bodyTexts.get(request);
}
