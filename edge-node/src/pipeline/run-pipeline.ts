/**
 * Runs one request through PIPELINE (stages.ts) and delivers the answer (owner: pipeline-core).
 * Route files call this; it never throws for an expected rejection (the reply carries the code).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { zenovaError } from '../errors.js';
import type { ApiKind, Surface } from './context.js';
import type { PipelineDeps } from './deps.js';

export interface PipelineCall {
  api: ApiKind;
  surface: Surface;
}

export async function runPipeline(request: FastifyRequest, reply: FastifyReply, deps: PipelineDeps, call: PipelineCall): Promise<FastifyReply> {
  void request;
  void reply;
  void deps;
  void call;
  throw zenovaError('ZN_ERR_INTERNAL', 'The pipeline is not implemented yet.');
}
