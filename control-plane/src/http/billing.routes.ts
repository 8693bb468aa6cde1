/** The billing admin API: balances, credits, leases, spend (inside the /api/v1 admin scope). Stub until its module lands. */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import type { SecretBox } from '../crypto/secret-box.js';

export const billingRoutes: FastifyPluginAsync<{ pool: pg.Pool; secretBox: SecretBox | undefined }> = async (fastify, opts) => {
  void fastify;
  void opts;
};
