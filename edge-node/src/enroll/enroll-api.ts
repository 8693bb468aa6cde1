// The control plane's enrollment API as the node sees it (contract of issue 3): request and
// response shapes, validated with zod before anything is trusted or saved.
import { z } from 'zod';
import { gatewayTargetSchema } from '../state/identity.js';
import { MAX_PEM_CHARS, isCertificatePem, publicKeyPemSchema } from '../state/pem.js';
import { storedCredentialSchema } from '../state/credential-store.js';

export const PREFLIGHT_PATH = '/api/enroll/preflight';
export const ENROLL_PATH = '/api/enroll';
export const PRODUCT = 'zenova-gateway';

export interface EnrollRequest {
  token: string;
  mode: 'install' | 'reenroll';
  facts: { hostname: string; arch: string; version: string; protocolVersion: number };
  /** Random per enrollment attempt (32 bytes base64url): lets a rerun retry a lost answer. */
  redemptionKey?: string;
  /**
   * --reenroll: the node id this state dir holds (identity.json). The control plane refuses a token
   * of another node while that node is live (ZN_ERR_CP_TOKEN_WRONG_NODE), with nothing revoked.
   */
  installedNodeId?: string;
  /**
   * The dir the installer installs the node into (`zenova install node`): the control plane records
   * it as the node's install dir, which its later commands carry. `zenova-node enroll` sends none.
   */
  installDir?: string;
}

/**
 * The gateway CA in the answer: a PEM certificate (bundle) to pin, or '' when the control plane
 * pins none (external gateway certificate without ZENOVA_GATEWAY_TRUST_BUNDLE): the node then
 * verifies the gateway against its system trust store. The field is always present; '' is the only
 * way to say "none".
 */
export const gatewayCaPemSchema = z
  .string()
  .max(MAX_PEM_CHARS)
  .refine((pem) => pem === '' || isCertificatePem(pem), "must be a PEM certificate, or '' for the system trust store");

/**
 * Where nodes dial the node gateway, as the enrollment answer hands it to them (`gateway`): the
 * target (HOST:PORT), the name its certificate must carry and the CA to pin ('' for the system trust
 * store). The installer checks it before a token is used (NODE-CP-GATEWAY…).
 */
export const preflightGatewaySchema = z.object({
  target: gatewayTargetSchema,
  serverName: z.string().min(1).max(253),
  caPem: gatewayCaPemSchema,
});
export type PreflightGateway = z.infer<typeof preflightGatewaySchema>;

export const preflightResponseSchema = z.object({
  product: z.string().max(64),
  version: z.string().max(64),
  protocolVersion: z.number().int(),
  serverTime: z.string().max(64),
  serverTimeMs: z.number().int().nonnegative(),
  /** The control plane takes a redemption key (older ones refuse the unknown field). */
  redemptionKeys: z.boolean().optional(),
  /** The control plane takes `installedNodeId` (older ones refuse the unknown field). */
  installedNodeIds: z.boolean().optional(),
  /** The control plane takes `installDir` (older ones refuse the unknown field). */
  installDirs: z.boolean().optional(),
  /**
   * The node gateway nodes will be told to dial; an older control plane (or one running no gateway)
   * leaves it out. One that does not parse is read as left out: the preflight stays usable for
   * enrollment, and the installer says its gateway was not checked.
   */
  gateway: preflightGatewaySchema.optional().catch(undefined),
});

export type PreflightResponse = z.infer<typeof preflightResponseSchema>;

export const enrollResponseSchema = z.object({
  nodeId: z.string().min(1).max(128),
  nodeName: z.string().min(1).max(64),
  credential: storedCredentialSchema,
  gateway: z.object({
    target: gatewayTargetSchema,
    serverName: z.string().min(1).max(253),
    caPem: gatewayCaPemSchema,
  }),
  configSigningPublicKeyPem: publicKeyPemSchema,
  controlPlaneUrl: z.string().max(2048),
  /**
   * How many node-edge processes the host runs (`serve --replicas`, 1–999); the installer writes it
   * to etc/node.env. An older control plane leaves it out: 1.
   */
  replicas: z.number().int().min(1).max(999).optional(),
});
export type EnrollResponse = z.infer<typeof enrollResponseSchema>;

/** The OpenAI-style error body of the control plane. */
export const errorBodySchema = z.object({
  error: z.object({
    message: z.string().max(2000).optional(),
    code: z.string().max(100).optional(),
    type: z.string().max(100).optional(),
  }),
});
