/**
 * Enrollment: a node redeems its install or reenroll token and gets its identity — node id, first
 * credential, the gateway to dial and its CA, the config-signing public key. Redeeming the token,
 * recording the host's facts and issuing the credential happen in one transaction; the gateway
 * information is fetched first, so a failure there does not burn the token.
 *
 * The node validates the answer before it saves anything, and a refused answer cannot be redeemed
 * again (the token is used, the old credentials revoked). So the answer is checked here against the
 * node's rules first: the gateway part and signing key before the token is touched, the whole answer
 * before the transaction commits. An answer the node would refuse is a 503 and burns nothing.
 *
 * After the commit the answer can still be lost on the way. A node that sent a redemption key can
 * then retry with the same token and key (install-tokens.ts says when that is accepted): it gets the
 * same node, gateway and signing key again and a newly issued credential, and the credential of the
 * lost answer is revoked. Only hashes are stored, so the lost credential cannot be sent again.
 *
 * A re-enrolling node names the node its state dir holds (installedNodeId): a token of another node
 * is refused while that node is live, with the transaction rolled back (installedNodeConflict).
 *
 * The installer names the dir it installs the node into (installDir, both modes; `zenova-node
 * enroll` run by hand names none): it is recorded on the node in the same transaction, so the
 * commands issued later (reenroll-command) carry the dir the node is really in. An upgrade redeems
 * no enrollment token and keeps the installed dir.
 *
 * Upgrade redemption (upgrade-redemption.ts) checks the same host facts and protocol, and maps
 * token failures with the same function, so the two answer alike.
 */
import { X509Certificate, createPublicKey } from 'node:crypto';
import type pg from 'pg';
import { z } from 'zod';
import { describeProtocolMismatch, isCompatibleProtocol, MAX_PROTOCOL_VERSION_FACT, PROTOCOL_VERSION } from '../../../proto/src/protocol-version.js';
import { zenovaError } from '../errors.js';
import type { ZenovaError } from '../errors.js';
import { issueCredential, revokeNodeCredentials } from './credentials.js';
import type { CredentialTimings } from './credentials.js';
import { REDEMPTION_KEY_PATTERN, recordRedemptionCredential, redeemInstallToken } from './install-tokens.js';
import type { InstallTokenKind, RedeemFailure } from './install-tokens.js';
import { UUID_PATTERN } from '../billing/ledger.js';
import { findNodeById, recordEnrollment } from './node-repository.js';
import type { NodeRow } from './node-repository.js';
import { installDirSchema } from './node-validation.js';
import type { Queryable } from './with-transaction.js';
import { withTransaction } from './with-transaction.js';

/** What enrollment needs from the gateway side; main passes the real one, tests a stub. */
export interface EnrollmentDeps {
  gatewayInfo(): Promise<{ target: string; serverName: string; caPem: string }>;
  configSigningPublicKeyPem(): Promise<string>;
}

export const ENROLL_MODES = ['install', 'reenroll'] as const;
export type EnrollMode = (typeof ENROLL_MODES)[number];

/** Enrollment request bodies are tiny; anything bigger is not one. */
export const ENROLL_BODY_LIMIT_BYTES = 8 * 1024;

/** The rules of the host facts a node sends with a token; upgrade redemption checks the same. */
/** A zod error option that states `rule`, for every way a value can break it (zod's own words name types, not fixes). */
export const stated = (rule: string) => ({ error: () => rule });

/** For an object: `rule` when it is no object at all; an unknown key keeps its own "unknown field" message. */
export const factsRule = (rule: string) => ({ error: (issue: { code?: string }) => (issue.code === 'invalid_type' ? rule : undefined) });

const factText = (max: number, pattern: RegExp, rule: string) =>
  z.string(stated(rule)).min(1, stated(rule)).max(max, stated(rule)).regex(pattern, stated(rule));

const PROTOCOL_RULE = `must be an integer from 0 to ${MAX_PROTOCOL_VERSION_FACT}`;

/** The rules of the host facts a node sends with a token; upgrade redemption checks the same. */
export const hostFactRules = {
  hostname: factText(253, /^[A-Za-z0-9._-]+$/, 'must be a host name of 1 to 253 letters, digits, . _ -'),
  arch: factText(32, /^[A-Za-z0-9_-]+$/, 'must be an architecture name such as x86_64 or aarch64'),
  version: factText(64, /^[A-Za-z0-9.+_-]+$/, 'must be a version such as 1.2.3'),
  protocolVersion: z.number(stated(PROTOCOL_RULE)).int(stated(PROTOCOL_RULE)).min(0, stated(PROTOCOL_RULE)).max(MAX_PROTOCOL_VERSION_FACT, stated(PROTOCOL_RULE)),
};

const REDEMPTION_RULE = 'must be 43 base64url characters';
const INSTALLED_NODE_RULE = 'must be the node id of the state dir\'s identity.json (1 to 128 characters)';
const TOKEN_RULE = 'must be the token of a one-time command (1 to 256 characters)';
/** The token text: bounded, never checked for shape (an unknown token is the answer to a bad one). */
export const tokenRule = z.string(stated(TOKEN_RULE)).min(1, stated(TOKEN_RULE)).max(256, stated(TOKEN_RULE));

export const enrollRequestSchema = z.strictObject({
  token: tokenRule,
  mode: z.enum(ENROLL_MODES, stated(`must be one of ${ENROLL_MODES.join(', ')}`)),
  facts: z.strictObject(hostFactRules, factsRule('must be an object of hostname, arch, version and protocolVersion')),
  /** Random per enrollment attempt (32 bytes, base64url); lets the node retry an answer it lost. */
  redemptionKey: z.string(stated(REDEMPTION_RULE)).regex(REDEMPTION_KEY_PATTERN, stated(REDEMPTION_RULE)).optional(),
  /**
   * --reenroll: the node id the host's state dir holds (its identity.json). A token of another node
   * is then refused while that node is live (installedNodeConflict). Optional: older nodes do not
   * send it and keep the old behaviour.
   */
  installedNodeId: z.string(stated(INSTALLED_NODE_RULE)).min(1, stated(INSTALLED_NODE_RULE)).max(128, stated(INSTALLED_NODE_RULE)).optional(),
  /**
   * The dir the installer installs the node into (`zenova install node`, install and reenroll):
   * recorded as the node's installDir, by the rules and normalisation of the create field. Optional:
   * `zenova-node enroll` by hand and older nodes send none, and the stored dir is kept.
   */
  installDir: installDirSchema.optional(),
});

export type EnrollRequest = z.output<typeof enrollRequestSchema>;

// The node's rules for the answer (edge-node/src/enroll/enroll-api.ts): the two sides share no
// code, so they are restated here; keep them in step.
const MAX_PEM_CHARS = 64 * 1024;
const GATEWAY_TARGET = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/;
/** Printable ASCII without spaces: the node sends the credential as a gRPC metadata value. */
const METADATA_SAFE = /^[\x21-\x7e]+$/;

function parses(parse: () => unknown): boolean {
  try {
    parse();
    return true;
  } catch {
    return false;
  }
}

/**
 * Where and how the node reaches the gateway. `caPem` is the CA the node pins, or '' for none: the
 * node then verifies the gateway against its system trust store (external gateway certificate
 * without ZENOVA_GATEWAY_TRUST_BUNDLE). The field is always present.
 */
export const enrollGatewaySchema = z.object({
  target: z.string().max(300).regex(GATEWAY_TARGET, 'must be HOST:PORT'),
  serverName: z.string().min(1).max(253),
  caPem: z.string().max(MAX_PEM_CHARS)
    .refine((pem) => pem === '' || parses(() => new X509Certificate(pem)), "must be a PEM certificate, or '' for the node's system trust store"),
});

/** The node's `replicas` in an answer (enrollment, upgrade redemption): the node's `serve --replicas` range. */
export const replicasAnswerSchema = z.number().int().min(1).max(999).optional();

const publicKeyPemSchema = z.string().max(MAX_PEM_CHARS).refine((pem) => parses(() => createPublicKey(pem)), 'must be a PEM public key');

export const enrollResponseSchema = z.object({
  nodeId: z.string().min(1).max(128),
  nodeName: z.string().min(1).max(64),
  credential: z.object({
    id: z.string().min(1).max(128),
    secret: z.string().min(1).max(1024).regex(METADATA_SAFE, 'must be printable ASCII without spaces'),
    expiresAt: z.iso.datetime({ offset: true }),
  }),
  gateway: enrollGatewaySchema,
  configSigningPublicKeyPem: publicKeyPemSchema,
  controlPlaneUrl: z.string().max(2048),
  /**
   * How many node-edge processes the host runs (the node's `replicas`, seed 004 §9.3): the installer
   * writes it to etc/node.env. Optional for the node, which reads its absence (an older control
   * plane) as 1; an older node ignores it. 1–999 is the node's range for `serve --replicas`.
   */
  replicas: replicasAnswerSchema,
});

export type EnrollResponse = z.infer<typeof enrollResponseSchema>;

/** What the redeemed token was for: enrolling (install or reenroll) or upgrading an installed node. */
export type RedemptionPurpose = EnrollMode | 'upgrade';

function newCommand(purpose: RedemptionPurpose): string {
  if (purpose === 'upgrade') {
    return 'issue a new upgrade command in the console (node detail › Issue upgrade command) or with ' +
      '`zenova gateway-node upgrade-command NAME` and run that';
  }
  return 'issue a new command in the console (node detail) or with `zenova gateway-node install-command NAME` ' +
    '(`reenroll-command` for --reenroll) and run that';
}

function wrongKindMessage(kind: InstallTokenKind, purpose: RedemptionPurpose): string {
  if (purpose === 'upgrade') {
    return `This is ${kind === 'install' ? 'an install' : 'a reenroll'} token; an upgrade needs an upgrade command: ` +
      '`zenova gateway-node upgrade-command NAME`, or node detail › Issue upgrade command.';
  }
  if (kind === 'upgrade') {
    return 'This is an upgrade token: it upgrades an installed node (zenova install node … --upgrade) and cannot enroll one.';
  }
  if (kind === 'install') {
    return `This is an install token but the command re-enrolls (--${purpose}); run the install command exactly as issued, ` +
      'without --reenroll, or issue a reenroll command with `zenova gateway-node reenroll-command NAME`.';
  }
  return 'This is a reenroll token: run it with --reenroll, exactly as issued, or issue an install command with ' +
    '`zenova gateway-node install-command NAME`.';
}

export function redeemFailureError(failure: RedeemFailure, purpose: RedemptionPurpose): ZenovaError {
  switch (failure.reason) {
    case 'unknown':
      return zenovaError('ZN_ERR_CP_TOKEN_UNKNOWN');
    case 'node-deleted':
      return zenovaError('ZN_ERR_CP_NODE_DELETED');
    case 'wrong-kind':
      return zenovaError('ZN_ERR_CP_TOKEN_WRONG_KIND', wrongKindMessage(failure.kind, purpose));
    case 'used':
      return zenovaError('ZN_ERR_CP_TOKEN_USED', `The token was already used at ${failure.usedAt.toISOString()}; ${newCommand(purpose)}.`);
    case 'superseded':
      return zenovaError(
        'ZN_ERR_CP_TOKEN_SUPERSEDED',
        `The token was replaced by a newer command issued at ${failure.invalidatedAt.toISOString()}; run the newest command.`,
      );
    case 'expired':
      return zenovaError('ZN_ERR_CP_TOKEN_EXPIRED', `The token expired at ${failure.expiresAt.toISOString()}; ${newCommand(purpose)}.`);
  }
}

/** Refuses a node that speaks another control protocol, before any token is touched. */
export function assertCompatibleProtocol(protocolVersion: number): void {
  if (isCompatibleProtocol(protocolVersion)) return;
  throw zenovaError(
    'ZN_ERR_CP_PROTOCOL_INCOMPATIBLE',
    `${describeProtocolMismatch(PROTOCOL_VERSION, protocolVersion)}; install the node package of this control plane's version.`,
  );
}

/**
 * DESIGN §3: redeeming "for another node fails with a clear code". A re-enrollment whose token is
 * of another node than the one the host holds is refused while that node is live: going on would
 * revoke every credential of the token's node (cutting off its real host) and leave the host's
 * node orphaned with a working credential. The only legitimate case, the host's node deleted and
 * created again (a new id), goes on. The token's node is not named: the token alone must not tell
 * which node it belongs to.
 */
async function installedNodeConflict(client: pg.PoolClient, installedNodeId: string | undefined, tokenNodeId: string): Promise<ZenovaError | undefined> {
  if (installedNodeId === undefined || installedNodeId.toLowerCase() === tokenNodeId.toLowerCase()) return undefined;
  // Not a node id at all (a hand-edited identity): no live node to protect.
  if (!UUID_PATTERN.test(installedNodeId)) return undefined;
  const installed = await findNodeById(client, installedNodeId.toLowerCase());
  if (installed === undefined || installed.deletedAt !== null) return undefined;
  // Nor is the installed node named: the host knows it from its identity.json (the node CLI names
  // it there), and a token holder must not learn a live node's name from an id it tries.
  return zenovaError(
    'ZN_ERR_CP_TOKEN_WRONG_NODE',
    "This reenroll token was issued for another node than the one this host holds (its identity.json's node), which is not deleted; " +
      "nothing was changed and the token was not used. To re-enroll this host, run its own node's reenroll command " +
      '(`zenova gateway-node reenroll-command NAME`); if this host really is to become the other node, delete its node first ' +
      '(`zenova gateway-node delete NAME --yes`) and run this command again.',
  );
}

/** A ZenovaError naming what the node would refuse in `value`, or undefined when it would accept it. */
function unusableAnswer(schema: z.ZodType, value: unknown, what: string): ZenovaError | undefined {
  const checked = schema.safeParse(value);
  if (checked.success) return undefined;
  const fields = [...new Set(checked.error.issues.map((i) => `${[what, ...i.path.map(String)].join('.')}: ${i.message}`))].slice(0, 3).join('; ');
  return zenovaError(
    'ZN_ERR_CP_ENROLLMENT_UNAVAILABLE',
    `This control plane would hand out an enrollment answer the node refuses (${fields}); the token was not used. ` +
      "Fix the control plane's gateway settings and try again.",
  );
}

/**
 * Records the dir the installer installed the node into (already normalised by the schema), in the
 * enrollment's transaction; without one (a node enrolled by hand, an older node) the stored dir stays.
 */
async function recordInstallDir(client: Queryable, node: NodeRow, installDir: string | undefined): Promise<NodeRow> {
  if (installDir === undefined || installDir === node.installDir) return node;
  await client.query('update nodes set install_dir = $2 where id = $1', [node.id, installDir]);
  return { ...node, installDir };
}

export async function enrollNode(
  pool: pg.Pool,
  request: EnrollRequest,
  deps: EnrollmentDeps,
  timings: CredentialTimings,
  now: Date = new Date(),
): Promise<EnrollResponse & { retry: boolean }> {
  const { facts, mode } = request;
  assertCompatibleProtocol(facts.protocolVersion);
  const gateway = await deps.gatewayInfo();
  const configSigningPublicKeyPem = await deps.configSigningPublicKeyPem();
  // Before the token is touched: an answer the node would refuse must not cost the token.
  const badGateway = unusableAnswer(enrollGatewaySchema, gateway, 'gateway') ?? unusableAnswer(publicKeyPemSchema, configSigningPublicKeyPem, 'configSigningPublicKeyPem');
  if (badGateway !== undefined) throw badGateway;
  return withTransaction(pool, async (client) => {
    // Seed 004 §9.6: a new host replacing a lost one runs the reenroll command without --reenroll,
    // so a reenroll token also enrolls in install mode; an install token never re-enrolls.
    const redeemed = await redeemInstallToken(client, request.token, mode === 'install' ? ['install', 'reenroll'] : ['reenroll'], now, {
      redemptionKey: request.redemptionKey,
    });
    if (!redeemed.ok) throw redeemFailureError(redeemed, mode);
    // Thrown inside the transaction: the redemption rolls back, nothing is revoked.
    // Only a re-enrollment: the node sends installedNodeId with --reenroll alone, and an install
    // (a new host) holds no node to protect.
    const conflict = mode === 'reenroll' ? await installedNodeConflict(client, request.installedNodeId, redeemed.nodeId) : undefined;
    if (conflict !== undefined) throw conflict;
    // A retry (redeemed.retry) goes the same way: its facts are recorded again, and revoking the
    // node's credentials revokes the one the lost answer carried.
    const node = await recordInstallDir(client, await recordEnrollment(client, redeemed.nodeId, facts, now), request.installDir);
    // One host per node identity: whoever held the old credentials (a re-enrolled or replaced
    // host) is cut off, on every replica.
    await revokeNodeCredentials(client, node.id, { now });
    const credential = await issueCredential(client, node.id, timings, now);
    await recordRedemptionCredential(client, redeemed.tokenId, credential.credentialId);
    const answer: EnrollResponse = {
      nodeId: node.id,
      nodeName: node.name,
      credential: { id: credential.credentialId, secret: credential.credential, expiresAt: credential.expiresAt.toISOString() },
      gateway,
      configSigningPublicKeyPem,
      controlPlaneUrl: node.controlPlaneUrl,
      // The count as it is now: a re-enrollment (or an upgrade) takes a changed one to the host.
      replicas: node.replicas,
    };
    // Still inside the transaction: throwing rolls the redemption back. The route's response schema
    // is this same one, so the serializer cannot fail after the commit either.
    const badAnswer = unusableAnswer(enrollResponseSchema, answer, 'answer');
    if (badAnswer !== undefined) throw badAnswer;
    return { ...answer, retry: redeemed.retry };
  });
}
