// Anthropic's caller surface: POST /v1/messages (JSON and SSE), through the request pipeline.
import type { FastifyInstance } from 'fastify';
import type { PipelineDeps } from '../pipeline/deps.js';
import { runPipeline } from '../pipeline/run-pipeline.js';

export function registerAnthropicRoutes(app: FastifyInstance, deps: PipelineDeps): void {
  app.post('/v1/messages', async (request, reply) => {
    // Anthropic's SDKs read the request id from `request-id` (APIError.requestID, _request_id).
    // Set on the raw response so it survives the runner taking over the response for streams.
    reply.raw.setHeader('request-id', request.id);
    return runPipeline(request, reply, deps, { api: 'messages', surface: 'model' });
  });
}
