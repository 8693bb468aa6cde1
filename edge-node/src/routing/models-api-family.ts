// Which API family GET /v1/models and /v1/models/{id} answer for: Anthropic's Models API when the
// request carries `anthropic-version` (the Anthropic SDKs send it on every call), OpenAI's
// otherwise. Both SDKs call the same paths; the list holds the aliases of that family.
import type { IncomingHttpHeaders } from 'node:http';
import type { RuntimeRoute } from '../config/runtime-config.js';

export function modelsApiFamily(headers: IncomingHttpHeaders): RuntimeRoute['family'] {
  return headers['anthropic-version'] === undefined ? 'openai' : 'anthropic';
}
