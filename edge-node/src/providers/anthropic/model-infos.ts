// Anthropic's Models API shapes (the SDK's ModelInfo and its Page), for the aliases the node lists
// to a GET /v1/models that carries `anthropic-version` (openai/models.ts). The node knows an
// alias, not the model's facts: capabilities, limits and lifecycle dates are null, as Anthropic's
// API gives them when unknown.

export interface AnthropicModelInfo {
  type: 'model';
  id: string;
  display_name: string;
  /** RFC 3339. */
  created_at: string;
  capabilities: null;
  deprecated_at: null;
  lifecycle: 'active';
  line: null;
  max_input_tokens: null;
  max_tokens: null;
  retires_at: null;
}

export interface AnthropicModelPage {
  data: AnthropicModelInfo[];
  has_more: false;
  first_id: string | null;
  last_id: string | null;
}

/** `createdAt` in Unix seconds. */
export function anthropicModelInfo(alias: string, createdAt: number): AnthropicModelInfo {
  return {
    type: 'model',
    id: alias,
    display_name: alias,
    created_at: new Date(createdAt * 1000).toISOString(),
    capabilities: null,
    deprecated_at: null,
    lifecycle: 'active',
    line: null,
    max_input_tokens: null,
    max_tokens: null,
    retires_at: null,
  };
}

/** The whole list as one page: the node holds few aliases and returns them all (has_more false). */
export function anthropicModelPage(models: AnthropicModelInfo[]): AnthropicModelPage {
  return { data: models, has_more: false, first_id: models[0]?.id ?? null, last_id: models.at(-1)?.id ?? null };
}
