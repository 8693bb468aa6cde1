/**
 * The admin operations on nodes, each in one transaction: create (with its first install command),
 * issue a command of a kind, edit the network fields, edit the settings nodes serve with (surfaces,
 * spool), delete. Deleting revokes the node's credentials, invalidates its tokens and tells every
 * replica (NOTIFY node-deleted) — all or nothing. Create, edits and delete record a config version
 * (an edit that leaves every network field or setting as it is records none).
 */
import type pg from 'pg';
import { z } from 'zod';
import { recordConfigChange } from '../config/config-changes.js';
import { zenovaError } from '../errors.js';
import { checkIfMatch } from '../http/if-match.js';
import type { IfMatch } from '../http/if-match.js';
import { revokeNodeCredentials } from './credentials.js';
import { checkCommand, installCommand } from './install-command.js';
import { invalidateNodeTokens, issueInstallToken } from './install-tokens.js';
import type { InstallTokenKind } from './install-tokens.js';
import { notifyNodeEvent } from './node-events.js';
import { findLiveNodeByName, insertNode, markNodeDeleted, updateNodeNetwork } from './node-repository.js';
import type { NodeRow } from './node-repository.js';
import { nodeEtag } from './node-view.js';
import { CENTRAL_NODE_NAME, SPOOL_FULL_POLICIES, SPOOL_QUOTA_GB, surfacesSchema } from './node-validation.js';
import type { NodeCreateInput, NodeNetworkPatch } from './node-validation.js';
import { returnLeasesOfNode } from '../billing/credit-leases.js';
import { withTransaction } from './with-transaction.js';
import type { Queryable } from './with-transaction.js';

export interface IssuedCommand {
  kind: InstallTokenKind;
  command: string;
  /**
   * The same installer run with `--check-only` and no token (install-command.ts `checkCommand`):
   * the pre-check to run first, any number of times; it spends no token.
   */
  checkCommand: string;
  /** Shown once; only its hash is stored. */
  token: string;
  expiresAt: Date;
  /** The node's CA, to save as zenova-control-plane-ca.pem next to the package; null without one. */
  caPem: string | null;
}

function notFound(name: string): Error {
  return zenovaError('ZN_ERR_CP_NODE_NOT_FOUND', `No node named '${name}'.`);
}

export async function getNode(db: Queryable, name: string): Promise<NodeRow> {
  const node = await findLiveNodeByName(db, name);
  if (!node) throw notFound(name);
  return node;
}

async function issueFor(client: pg.PoolClient, node: NodeRow, kind: InstallTokenKind, ttlMs: number, now: Date): Promise<IssuedCommand> {
  const issued = await issueInstallToken(client, node.id, kind, ttlMs, now);
  if (!issued) throw notFound(node.name);
  const settings = { kind, controlPlaneUrl: node.controlPlaneUrl, hasCa: node.caPem !== null, installDir: node.installDir };
  const command = installCommand({ ...settings, token: issued.token });
  return { kind, command, checkCommand: checkCommand(settings), token: issued.token, expiresAt: issued.expiresAt, caPem: node.caPem };
}

export async function createNode(
  pool: pg.Pool,
  input: NodeCreateInput,
  installTokenTtlMs: number,
  now: Date = new Date(),
): Promise<{ node: NodeRow; install: IssuedCommand }> {
  return withTransaction(pool, async (client) => {
    const node = await insertNode(client, input, now);
    const install = await issueFor(client, node, 'install', installTokenTtlMs, now);
    await recordConfigChange(client, { entity: 'node', entityId: node.id, action: 'create' });
    return { node, install };
  });
}

/** A new command of `kind`; the previous unused token of that kind stops working. */
export async function issueCommand(
  pool: pg.Pool,
  name: string,
  kind: InstallTokenKind,
  installTokenTtlMs: number,
  now: Date = new Date(),
): Promise<IssuedCommand> {
  return withTransaction(pool, async (client) => {
    const node = await findLiveNodeByName(client, name);
    if (!node) throw notFound(name);
    return issueFor(client, node, kind, installTokenTtlMs, now);
  });
}

/**
 * Whether `patch` leaves every network field as `node` has it. The schemas put each field in its
 * stored form (address in lower case, no trailing '/' on the URL, the CA's certificates LF-ended,
 * one after the other, as parseCaPem writes them), so equal values compare equal as text.
 */
function networkUnchanged(node: NodeRow, patch: NodeNetworkPatch): boolean {
  return (patch.address === undefined || patch.address === node.address)
    && (patch.controlPlaneUrl === undefined || patch.controlPlaneUrl === node.controlPlaneUrl)
    && (patch.caPem === undefined || patch.caPem === node.caPem);
}

/** Network fields the node already has record nothing (no version, no push to every node). */
export async function editNodeNetwork(pool: pg.Pool, name: string, patch: NodeNetworkPatch, ifMatch?: IfMatch): Promise<NodeRow> {
  return withTransaction(pool, async (client) => {
    const node = await findLiveNodeByName(client, name, { forUpdate: true });
    if (!node) throw notFound(name);
    // Under the row lock until commit: a writer holding the same ETag waits here and is refused.
    checkIfMatch(ifMatch, nodeEtag(node));
    if (networkUnchanged(node, patch)) return node;
    if (!(await updateNodeNetwork(client, node.id, patch))) throw notFound(name);
    await recordConfigChange(client, { entity: 'node', entityId: node.id, action: 'update' });
    // Read after the change is recorded, so the view's config figures include it.
    const updated = await findLiveNodeByName(client, name);
    if (!updated) throw notFound(name);
    return updated;
  });
}

const spoolQuotaRule = `must be an integer from ${SPOOL_QUOTA_GB.min} to ${SPOOL_QUOTA_GB.max}`;

/** Edit settings: the per-node part of the config bundle. Each field optional, at least one. */
export const nodeSettingsPatchSchema = z.strictObject({
  surfaces: surfacesSchema.optional(),
  spoolQuotaGb: z.number({ error: () => spoolQuotaRule }).int({ error: () => spoolQuotaRule })
    .min(SPOOL_QUOTA_GB.min, { error: () => spoolQuotaRule }).max(SPOOL_QUOTA_GB.max, { error: () => spoolQuotaRule }).optional(),
  spoolFullPolicy: z.enum(SPOOL_FULL_POLICIES, { error: () => `must be one of ${SPOOL_FULL_POLICIES.join(', ')}` }).optional(),
}, { error: (issue) => (issue.code === 'invalid_type' ? 'must be a JSON object' : undefined) })
  .check((ctx) => {
    if (ctx.value.surfaces === undefined && ctx.value.spoolQuotaGb === undefined && ctx.value.spoolFullPolicy === undefined) {
      ctx.issues.push({ code: 'custom', input: ctx.value, message: 'must change at least one of surfaces, spoolQuotaGb, spoolFullPolicy' });
    }
  });

export type NodeSettingsPatch = z.output<typeof nodeSettingsPatchSchema>;

/** Whether `patch` leaves every setting as `node` has it (surfaces come in one canonical order, so arrays compare). */
function settingsUnchanged(node: NodeRow, patch: NodeSettingsPatch): boolean {
  return (patch.surfaces === undefined
      || (patch.surfaces.length === node.surfaces.length && patch.surfaces.every((s, i) => s === node.surfaces[i])))
    && (patch.spoolQuotaGb === undefined || patch.spoolQuotaGb === node.spoolQuotaGb)
    && (patch.spoolFullPolicy === undefined || patch.spoolFullPolicy === node.spoolFullPolicy);
}

/**
 * Applies the given settings (undefined = keep) and records a config version: nodes get them in
 * their bundle. Settings the node already has record nothing (no version, no push to every node).
 */
export async function editNodeSettings(pool: pg.Pool, name: string, patch: NodeSettingsPatch, ifMatch?: IfMatch): Promise<NodeRow> {
  return withTransaction(pool, async (client) => {
    const node = await findLiveNodeByName(client, name, { forUpdate: true });
    if (!node) throw notFound(name);
    // Under the row lock until commit: a writer holding the same ETag waits here and is refused.
    checkIfMatch(ifMatch, nodeEtag(node));
    if (settingsUnchanged(node, patch)) return node;
    await client.query(
      `update nodes set surfaces = coalesce($2, surfaces),
                        spool_quota_gb = coalesce($3, spool_quota_gb),
                        spool_full_policy = coalesce($4, spool_full_policy)
        where id = $1`,
      [node.id, patch.surfaces ?? null, patch.spoolQuotaGb ?? null, patch.spoolFullPolicy ?? null],
    );
    await recordConfigChange(client, { entity: 'node', entityId: node.id, action: 'update' });
    // Read after the change is recorded, so the view's config figures include it.
    const updated = await findLiveNodeByName(client, name);
    if (!updated) throw notFound(name);
    return updated;
  });
}

/**
 * Whether `node` is the central node in the sense that forbids deleting it: the control-plane
 * host's own gateway, which the central install (today the dev stack, office-primary.ts) creates
 * through this same API under the reserved name and then enrolls. Nothing else marks it, so the name
 * alone cannot tell it from an `office-primary` an operator created by mistake. What makes the
 * delete harmful is an enrolled identity: the host keeps it and serves with it, a deleted node's
 * credential is refused for good, and the installer refuses a node on that host, so nothing could
 * put it back. Before it has enrolled nothing runs it: deleting it cuts nothing off, and the
 * central install creates it again as on a first start (its look-up finds no node).
 */
function isEnrolledCentralNode(node: NodeRow): boolean {
  return node.name === CENTRAL_NODE_NAME && node.enrolledAt !== null;
}

export async function deleteNode(pool: pg.Pool, name: string, ifMatch?: IfMatch, now: Date = new Date()): Promise<NodeRow> {
  return withTransaction(pool, async (client) => {
    // Row-locked: an enrollment (which writes enrolled_at), an edit or another delete waits for this commit.
    const node = await findLiveNodeByName(client, name, { forUpdate: true });
    if (!node) throw notFound(name);
    // Under the row lock until commit: an edit or delete holding the same ETag waits here and is refused.
    checkIfMatch(ifMatch, nodeEtag(node));
    if (isEnrolledCentralNode(node)) {
      throw zenovaError('ZN_ERR_CP_NODE_CENTRAL', `${CENTRAL_NODE_NAME} is the central node, installed with the control plane: deleting it would stop the control-plane host serving callers, and no node can be installed on that host again.`);
    }
    await markNodeDeleted(client, node.id, now);
    await invalidateNodeTokens(client, node.id, now);
    await revokeNodeCredentials(client, node.id, { notify: false, now });
    // Its unspent credit goes back to the accounts now, not when a lease would have expired.
    await returnLeasesOfNode(client, node.id);
    await notifyNodeEvent(client, { type: 'node-deleted', nodeId: node.id });
    await recordConfigChange(client, { entity: 'node', entityId: node.id, action: 'delete' });
    return node;
  });
}
