// The tools surface: /mcp/{server}, MCP streamable HTTP (POST messages, GET the server's event
// stream, DELETE the session), each call through the full pipeline as the `mcp` API.
import type { FastifyInstance } from 'fastify';
import type { PipelineDeps } from '../pipeline/deps.js';
import { runPipeline } from '../pipeline/run-pipeline.js';

export function registerMcpRoutes(app: FastifyInstance, deps: PipelineDeps): void {
  app.route({
    method: ['POST', 'GET', 'DELETE'],
    url: '/mcp/:server',
    // The tool server gets the caller's JSON-RPC as sent (mcp-call.ts), not a re-serialised parse.
    config: { keepBodyText: true },
    handler: (request, reply) => runPipeline(request, reply, deps, { api: 'mcp', surface: 'tools' }),
  });
}
