/**
 * identity.json: who this node is and whom it trusts, as saved at enrollment. Not secret by itself
 * (no credential in it) but written 0600 like every state file.
 */
import { z } from 'zod';
import { describeIssues } from '../zod-issues.js';
import { certificatePemSchema, publicKeyPemSchema } from './pem.js';
import { StateFileError } from './state-store.js';
import type { StateStore } from './state-store.js';

export const IDENTITY_FILE = 'identity.json';

/** `host:port` or `[v6]:port`, the form nodes dial. */
export const gatewayTargetSchema = z
  .string()
  .max(300)
  .regex(/^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, 'must be HOST:PORT');

export const nodeIdentitySchema = z.object({
  nodeId: z.string().min(1).max(128),
  nodeName: z.string().min(1).max(64),
  controlPlaneUrl: z.url({ protocol: /^https$/, error: 'must be an https:// URL' }).max(2048),
  /** The CA the operator passed with --ca-file; absent when the system store verified the control plane. */
  controlPlaneCaPem: certificatePemSchema.optional(),
  gateway: z.object({
    target: gatewayTargetSchema,
    /** The name the gateway certificate must carry (checked on every connection). */
    serverName: z.string().min(1).max(253),
    /**
     * The CA pinned at enrollment, the only one trusted for the gateway. Absent when the control
     * plane handed out none (external gateway certificate without ZENOVA_GATEWAY_TRUST_BUNDLE):
     * the gateway is then verified against this host's system trust store (see gatewayTrust).
     */
    caPem: certificatePemSchema.optional(),
  }),
  configSigningPublicKeyPem: publicKeyPemSchema,
  enrolledAt: z.iso.datetime({ offset: true }),
});

export type NodeIdentity = z.infer<typeof nodeIdentitySchema>;

/**
 * Which roots verify the gateway's certificate: the CA pinned at enrollment, or the system trust
 * store — Node's default CA store (its bundled roots plus NODE_EXTRA_CA_CERTS, or the OS store under
 * --use-openssl-ca), the same trust enrollment uses without --ca-file. Verification and the
 * server-name check happen either way.
 */
export type GatewayTrust = { kind: 'pinned-ca'; caPem: string } | { kind: 'system' };

export function gatewayTrust(gateway: NodeIdentity['gateway']): GatewayTrust {
  return gateway.caPem !== undefined ? { kind: 'pinned-ca', caPem: gateway.caPem } : { kind: 'system' };
}

/** The trust in words, for status, doctor and messages. */
export function describeGatewayTrust(trust: GatewayTrust['kind']): string {
  return trust === 'pinned-ca' ? 'the gateway CA pinned at enrollment' : "this host's system trust store";
}

/** The saved identity, or undefined when this state dir was never enrolled. */
export async function loadIdentity(store: StateStore): Promise<NodeIdentity | undefined> {
  const value = await store.read(IDENTITY_FILE);
  if (value === undefined) return undefined;
  const parsed = nodeIdentitySchema.safeParse(value);
  if (!parsed.success) throw new StateFileError(store.path(IDENTITY_FILE), describeIssues(parsed.error).join('; '));
  return parsed.data;
}

export async function saveIdentity(store: StateStore, identity: NodeIdentity): Promise<void> {
  await store.write(IDENTITY_FILE, nodeIdentitySchema.parse(identity));
}
