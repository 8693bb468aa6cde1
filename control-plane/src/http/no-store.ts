/**
 * `Cache-Control: no-store` on every answer: several carry a secret exactly once (a new API key's
 * secret, an install command's one-time token, an enrolled node's credential), and every other
 * answer is the database's state of the moment. Without it a proxy or the browser behind the
 * console could keep a copy of one on disk.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';

/** onRequest hook: set before any handler or error path can send the reply. */
export async function noStore(_request: FastifyRequest, reply: FastifyReply): Promise<void> {
  void reply.header('cache-control', 'no-store');
}
