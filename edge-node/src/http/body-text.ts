/**
 * The text of a JSON request body as it arrived, kept for the routes that relay the body as sent
 * (route config `keepBodyText`: MCP). A parsed and re-serialised copy is not the caller's request:
 * it rounds integers past 2^53 (a 64-bit id then names another record) and rewrites numbers' form.
 * The text is the one the JSON parser read (UTF-8 decoded), so what is relayed is what was checked.
 */
import type { FastifyRequest } from 'fastify';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route relays its JSON body as received: the app's parser keeps its text (bodyTextOf). */
    keepBodyText?: boolean;
  }
}

const bodyTexts = new WeakMap<FastifyRequest, string>();

/** Keeps `text`, the body `request` was parsed from, when its route asks for it. */
export function keepBodyText(request: FastifyRequest, text: string): void {
  if (request.routeOptions.config.keepBodyText === true) bodyTexts.set(request, text);
}

/** The body's text kept by keepBodyText; undefined for other routes and bodies that are not JSON. */
export function bodyTextOf(request: FastifyRequest): string | undefined {
  return bodyTexts.get(request);
}
