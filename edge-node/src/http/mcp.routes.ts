// The tools surface: /mcp/:server, MCP streamable HTTP (owner: mcp). Stub: registers nothing yet.
import type { FastifyInstance } from 'fastify';
import type { PipelineDeps } from '../pipeline/deps.js';

export function registerMcpRoutes(app: FastifyInstance, deps: PipelineDeps): void {
  void app;
  void deps;
}
