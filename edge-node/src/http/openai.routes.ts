// The OpenAI-compatible caller surface, each route one call into the request pipeline:
// POST /v1/chat/completions (JSON and SSE), POST /v1/embeddings, GET /v1/models and /v1/models/{id} (an id may contain `/`).
import type { FastifyInstance } from 'fastify';
import type { PipelineDeps } from '../pipeline/deps.js';
import { runPipeline } from '../pipeline/run-pipeline.js';

export function registerOpenAiRoutes(app: FastifyInstance, deps: PipelineDeps): void {
  app.post('/v1/chat/completions', (request, reply) => runPipeline(request, reply, deps, { api: 'chat.completions', surface: 'model' }));
  app.post('/v1/embeddings', (request, reply) => runPipeline(request, reply, deps, { api: 'embeddings', surface: 'model' }));
  app.get('/v1/models', (request, reply) => runPipeline(request, reply, deps, { api: 'models', surface: 'model' }));
  // A wildcard, not `:id`: aliases may contain `/` (`org/model`), which the SDKs may send unescaped;
  // the model is the rest of the path (models.ts).
  app.get('/v1/models/*', (request, reply) => runPipeline(request, reply, deps, { api: 'models', surface: 'model' }));
}
