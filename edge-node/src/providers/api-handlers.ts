/** Every caller API the node serves, by ApiKind: the one table the identify/route/forward stages consult. */
import type { ApiKind } from '../pipeline/context.js';
import type { ApiHandler } from './api-handler.js';
import { messagesApi } from './anthropic/messages.js';
import { mcpApi } from './mcp/mcp-call.js';
import { chatCompletionsApi } from './openai/chat-completions.js';
import { embeddingsApi } from './openai/embeddings.js';
import { modelsApi } from './openai/models.js';

export const API_HANDLERS: Readonly<Record<ApiKind, ApiHandler>> = {
  'chat.completions': chatCompletionsApi,
  embeddings: embeddingsApi,
  models: modelsApi,
  messages: messagesApi,
  mcp: mcpApi,
};
