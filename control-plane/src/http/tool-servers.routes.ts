/** The tool servers admin API (MCP servers callers reach at /mcp/{name} on nodes) (inside the /api/v1 admin scope). Stub until its module lands. */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import type { SecretBox } from '../crypto/secret-box.js';

export const toolServersRoutes: FastifyPluginAsync<{ pool: pg.Pool; secretBox: SecretBox | undefined }> = async (fastify, opts) => {
  void fastify;
  void opts;
};
