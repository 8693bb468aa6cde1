// Anthropic's caller surface: POST /v1/messages (owner: anthropic). Stub: registers nothing yet.
import type { FastifyInstance } from 'fastify';
import type { PipelineDeps } from '../pipeline/deps.js';

export function registerAnthropicRoutes(app: FastifyInstance, deps: PipelineDeps): void {
  void app;
  void deps;
}
