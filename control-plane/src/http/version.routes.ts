/** GET /api/version: what this control plane is, for the console, the CLI and enrolling nodes. */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { PROTOCOL_VERSION } from '../../../proto/src/protocol-version.js';
import { zenovaError } from '../errors.js';
import { PRODUCT_NAME, productVersion } from '../../../proto/src/product-version.js';

export const versionRoutes: FastifyPluginAsync<{ pool: pg.Pool }> = async (app, { pool }) => {
  // The installation id never changes once the first migration made it, so one read suffices.
  let installationId: string | undefined;
  const readInstallationId = async (): Promise<string> => {
    if (installationId) return installationId;
    const { rows } = await pool.query<{ id: string }>('select id from installation');
    const id = rows[0]?.id;
    if (!id) throw zenovaError('ZN_ERR_CP_INTERNAL', 'the installation row is missing; was the database migrated?');
    installationId = id;
    return id;
  };

  app.get('/api/version', async () => ({
    product: PRODUCT_NAME,
    component: 'control-plane',
    version: productVersion(),
    protocolVersion: PROTOCOL_VERSION,
    installationId: await readInstallationId(),
  }));
};
