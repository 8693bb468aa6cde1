/** GET /healthz: 200 while the database answers, 503 ZN_ERR_CP_DATABASE_UNAVAILABLE otherwise. */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { zenovaError } from '../errors.js';

// A probe must answer fast; a database this slow counts as unavailable.
const PROBE_TIMEOUT_MS = 2_000;

export const healthRoutes: FastifyPluginAsync<{ pool: pg.Pool }> = async (app, { pool }) => {
  // Probes call this every few seconds: only failures are worth a log line.
  app.get('/healthz', { logLevel: 'warn' }, async (request) => {
    try {
      await pool.query({ text: 'select 1', query_timeout: PROBE_TIMEOUT_MS } as pg.QueryConfig);
    } catch (err) {
      request.log.warn({ err }, 'health check: database unavailable');
      throw zenovaError('ZN_ERR_CP_DATABASE_UNAVAILABLE', undefined, { cause: err });
    }
    return { status: 'ok' };
  });
};
