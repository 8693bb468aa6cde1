/**
 * Request ids: a caller's `x-request-id` is kept when it is a sane token (so a call can be traced
 * across the console, the CLI and our logs), otherwise a fresh UUID; either way it is echoed back.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';

export const REQUEST_ID_HEADER = 'x-request-id';

// Bounded and free of anything that could forge log structure or smuggle header syntax.
const ACCEPTABLE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export function generateRequestId(req: IncomingMessage): string {
  const offered = req.headers[REQUEST_ID_HEADER];
  return typeof offered === 'string' && ACCEPTABLE_REQUEST_ID.test(offered) ? offered : randomUUID();
}

/** onRequest hook: set the header before any handler or error path can send the reply. */
export async function echoRequestId(request: FastifyRequest, reply: FastifyReply): Promise<void> {
  void reply.header(REQUEST_ID_HEADER, request.id);
}
