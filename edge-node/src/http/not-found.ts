// The answer to a request no route serves, with the hint that fixes the usual cause: a Base URL
// with one /v1 too many (the Anthropic SDKs append /v1/messages to theirs, so `<origin>/v1` sends
// /v1/v1/messages) or one too few (`<origin>` in an OpenAI client sends /chat/completions), or an
// endpoint's full URL pasted as the Base URL (`<origin>/v1/chat/completions` in an OpenAI client
// sends /v1/chat/completions/chat/completions).
import { zenovaError } from '../errors.js';
import type { ZenovaError } from '../errors.js';
import { shownPath } from './shown-path.js';

const BASE_URLS = 'OpenAI clients take http(s)://<node>:<port>/v1 as their Base URL, Anthropic clients the origin http(s)://<node>:<port> (they add /v1 themselves).';

/** A path with /v1 twice at its start: `/v1/v1` or `/v1/v1/…`. */
export function hasDoubledV1(url: string): boolean {
  return url.startsWith('/v1/v1') && (url.length === 6 || url[6] === '/' || url[6] === '?');
}

/**
 * Whether `path` (no query) with /v1 in front is a route the node serves for `method`
 * (openai.routes.ts, anthropic.routes.ts; fastify answers HEAD on its GET routes).
 */
function servedUnderV1(method: string, path: string): boolean {
  const get = method === 'GET' || method === 'HEAD';
  switch (path) {
    case '/chat/completions':
    case '/embeddings':
    case '/messages':
      return method === 'POST';
    case '/models':
      return get;
  }
  return get && path.startsWith('/models/');
}

/** The endpoint paths a client may be given as its Base URL by mistake (a request's full URL pasted). */
const ENDPOINT_PATHS: readonly string[] = ['/chat/completions', '/embeddings', '/messages', '/models'];

/**
 * A path that is a served endpoint's path with a served route's appended (`/v1/chat/completions`
 * + `/chat/completions`, `/v1/messages` + `/v1/messages`): a client given an endpoint's full URL
 * as its Base URL, to which it adds the route itself. What to take off the Base URL, or undefined.
 */
function endpointInBaseUrl(method: string, path: string): string | undefined {
  for (const endpoint of ENDPOINT_PATHS) {
    for (const pasted of [`/v1${endpoint}`, endpoint]) {
      if (!path.startsWith(`${pasted}/`)) continue;
      const added = path.slice(pasted.length);
      // An Anthropic client adds /v1/messages (its Base URL is the origin), an OpenAI client /chat/completions (its Base URL ends in /v1).
      const anthropicStyle = added.startsWith('/v1/');
      if (!servedUnderV1(method, anthropicStyle ? added.slice(3) : added)) continue;
      const fix = anthropicStyle || pasted === endpoint ? `Drop ${pasted} from the client's Base URL${anthropicStyle ? '' : ' and add /v1'}.` : `Drop ${endpoint} from the client's Base URL.`;
      return `the client's Base URL includes the endpoint path ${pasted}: the client adds the endpoint path itself (here ${shownPath(added)}). ${fix}`;
    }
  }
  return undefined;
}

/**
 * A path that starts with more than one slash (`//v1/messages`): a client that joins a Base URL
 * ending in `/` with `/v1/…`. The path as the node would serve it, or undefined.
 */
export function withoutExtraLeadingSlashes(url: string): string | undefined {
  return url.startsWith('//') ? url.replace(/^\/+/, '/') : undefined;
}

/** What is wrong with the client's Base URL when `url` misses the routes for its sake, or undefined. */
function baseUrlMistake(method: string, url: string): string | undefined {
  const single = withoutExtraLeadingSlashes(url);
  if (single !== undefined) {
    // Each of a Base URL's mistakes at once: `<origin>/` in an OpenAI client sends //chat/completions.
    const also = baseUrlMistake(method, single);
    const served = servedUnderV1(method, (single.split('?', 1)[0] ?? '').replace(/^\/v1(?=\/)/, ''));
    if (also === undefined && !served) return undefined;
    return `the path starts with more than one /. Drop the / at the end of the client's Base URL.${also === undefined ? '' : ` Also: ${also}`}`;
  }
  if (hasDoubledV1(url)) return "/v1 is in the path twice. Drop /v1 from the client's Base URL.";
  // `<origin>/v1/` in a client that does not trim it sends /v1//chat/completions.
  if (url.startsWith('/v1//') && servedUnderV1(method, (url.slice(3).replace(/^\/+/, '/').split('?', 1)[0] ?? ''))) {
    return "the path has // after /v1. Drop the / at the end of the client's Base URL.";
  }
  if (servedUnderV1(method, url.split('?', 1)[0] ?? '')) return `the node serves it as ${method} /v1${shownPath(url)}. Add /v1 to the client's Base URL.`;
  return endpointInBaseUrl(method, url.split('?', 1)[0] ?? '');
}

export function notFoundError(method: string, url: string): ZenovaError {
  const path = shownPath(url);
  const mistake = baseUrlMistake(method, url);
  if (mistake === undefined) return zenovaError('ZN_ERR_NOT_FOUND', `No route for ${method} ${path}.`);
  return zenovaError('ZN_ERR_NOT_FOUND', `No route for ${method} ${path}: ${mistake} ${BASE_URLS}`);
}
