/**
 * The enrollment API, outside /api/v1 (a node has no admin token; its install token is its proof):
 * `GET /api/enroll/preflight` answers without a token (reachability, clock skew, version, and the
 * node gateway nodes will dial, for the installer's pre-checks), and
 * `POST /api/enroll` redeems a token, `POST /api/enroll/upgrade` an upgrade token (the go-ahead for
 * `zenova install node --upgrade`). Redemption attempts of both are rate limited per client address
 * (an IPv4 address, an IPv6 /64, as the failed-login limit keys them), in one budget.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { PROTOCOL_VERSION } from '../../../proto/src/protocol-version.js';
import { zenovaError } from '../errors.js';
import { failedAdminAuthKey as clientAddressKey } from './failed-auth-limit.js';
import { FixedWindowRateLimiter } from '../nodes/enroll-rate-limit.js';
import { ENROLL_BODY_LIMIT_BYTES, enrollNode, enrollRequestSchema, enrollResponseSchema } from '../nodes/enrollment.js';
import type { EnrollmentDeps } from '../nodes/enrollment.js';
import { redeemUpgradeToken, upgradeRequestSchema, upgradeResponseSchema } from '../nodes/upgrade-redemption.js';
import { PRODUCT_NAME, productVersion } from '../../../proto/src/product-version.js';
import type { Settings } from '../settings.js';
import type { ZodTypeProvider } from './zod-schemas.js';

const RATE_WINDOW_MS = 60_000;

const preflightSchema = z.object({
  product: z.string(),
  version: z.string(),
  protocolVersion: z.number(),
  serverTime: z.string(),
  serverTimeMs: z.number(),
  /** This control plane accepts `redemptionKey` on POST /api/enroll (retry of a lost answer). */
  redemptionKeys: z.boolean(),
  /** This control plane takes `installedNodeId` on POST /api/enroll (refuses a reenroll token of another live node). */
  installedNodeIds: z.boolean(),
  /**
   * This control plane takes `installDir` on POST /api/enroll (the dir the installer installs the
   * node into, recorded on the node for its later commands).
   */
  installDirs: z.boolean(),
  /**
   * The node gateway as POST /api/enroll hands it to nodes (target HOST:PORT, the name its
   * certificate must carry, the CA nodes pin or '' for their system trust store), so the installer
   * can check it is reachable before a token is used. Absent when this process runs no gateway.
   */
  gateway: z.object({ target: z.string(), serverName: z.string(), caPem: z.string() }).optional(),
});

export interface EnrollmentRoutesOptions {
  pool: pg.Pool;
  settings: Settings;
  /** Absent when this process runs no node gateway: enrollment then answers 503. */
  enrollment: EnrollmentDeps | undefined;
}

/** What enrollment would hand out as `gateway`; left out (never an error) when it cannot be read. */
async function preflightGateway(enrollment: EnrollmentDeps | undefined): Promise<{ target: string; serverName: string; caPem: string } | undefined> {
  if (!enrollment) return undefined;
  try {
    const { target, serverName, caPem } = await enrollment.gatewayInfo();
    return { target, serverName, caPem };
  } catch {
    return undefined;
  }
}

export const enrollmentRoutes: FastifyPluginAsync<EnrollmentRoutesOptions> = async (fastify, { pool, settings, enrollment }) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  const limiter = new FixedWindowRateLimiter({ limit: settings.nodes.enrollAttemptsPerMinute, windowMs: RATE_WINDOW_MS });
  const timings = {
    validityMs: settings.nodes.credentialValidityMs,
    rotateAfterMs: settings.nodes.credentialRotateAfterMs,
    handoverMs: settings.nodes.credentialHandoverMs,
  };

  app.get('/api/enroll/preflight', {
    schema: { response: { 200: preflightSchema } },
  }, async () => {
    const gateway = await preflightGateway(enrollment);
    const now = new Date();
    return {
      product: PRODUCT_NAME,
      version: productVersion(),
      protocolVersion: PROTOCOL_VERSION,
      serverTime: now.toISOString(),
      serverTimeMs: now.getTime(),
      redemptionKeys: true,
      installedNodeIds: true,
      installDirs: true,
      ...(gateway !== undefined ? { gateway } : {}),
    };
  });

  // Counted before the body is even validated: every attempt costs, malformed ones too.
  const countAttempt = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    // By /64 for IPv6: one host usually holds a whole /64, and per address it would get 2^64 budgets.
    const decision = limiter.hit(clientAddressKey(request.ip));
    if (!decision.allowed) {
      void reply.header('retry-after', String(decision.retryAfterSeconds));
      throw zenovaError(
        'ZN_ERR_CP_ENROLL_RATE_LIMITED',
        `Too many enrollment attempts from this address; try again in ${decision.retryAfterSeconds} s.`,
      );
    }
  };

  app.post('/api/enroll', {
    bodyLimit: ENROLL_BODY_LIMIT_BYTES,
    onRequest: countAttempt,
    schema: { body: enrollRequestSchema, response: { 200: enrollResponseSchema } },
  }, async (request) => {
    if (!enrollment) throw zenovaError('ZN_ERR_CP_ENROLLMENT_UNAVAILABLE');
    const { retry, ...enrolled } = await enrollNode(pool, request.body, enrollment, timings);
    // Never the token, the redemption key or the credential.
    request.log.info(
      { node: enrolled.nodeName, nodeId: enrolled.nodeId, mode: request.body.mode, hostname: request.body.facts.hostname, retry },
      retry ? 'node enrolled again (retry of a lost answer; the credential it carried is revoked)' : 'node enrolled',
    );
    return enrolled;
  });

  // Needs no gateway: the node keeps its identity, so this answers where enrollment would 503.
  app.post('/api/enroll/upgrade', {
    bodyLimit: ENROLL_BODY_LIMIT_BYTES,
    onRequest: countAttempt,
    schema: { body: upgradeRequestSchema, response: { 200: upgradeResponseSchema } },
  }, async (request) => {
    const upgrade = await redeemUpgradeToken(pool, request.body);
    // Never the token.
    request.log.info(
      {
        node: upgrade.nodeName, nodeId: upgrade.nodeId, hostname: request.body.facts.hostname,
        fromVersion: request.body.facts.fromVersion, toVersion: upgrade.targetVersion,
      },
      'node upgrade started (upgrade token redeemed)',
    );
    return upgrade;
  });
};
