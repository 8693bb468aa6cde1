/**
 * The admin operations on nodes, each in one transaction: create (with its first install command),
 * issue a command of a kind, edit the network fields, delete. Deleting revokes the node's
 * credentials, invalidates its tokens and tells every replica (NOTIFY node-deleted) — all or nothing.
 */
import type pg from 'pg';
import { zenovaError } from '../errors.js';
import { revokeNodeCredentials } from './credentials.js';
import { installCommand } from './install-command.js';
import { invalidateNodeTokens, issueInstallToken } from './install-tokens.js';
import type { InstallTokenKind } from './install-tokens.js';
import { notifyNodeEvent } from './node-events.js';
import { findLiveNodeByName, insertNode, markNodeDeleted, updateNodeNetwork } from './node-repository.js';
import type { NodeRow } from './node-repository.js';
import type { NodeCreateInput, NodeNetworkPatch } from './node-validation.js';
import { withTransaction } from './with-transaction.js';
import type { Queryable } from './with-transaction.js';

export interface IssuedCommand {
  kind: InstallTokenKind;
  command: string;
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
  const command = installCommand({
    kind,
    controlPlaneUrl: node.controlPlaneUrl,
    token: issued.token,
    hasCa: node.caPem !== null,
    installDir: node.installDir,
  });
  return { kind, command, token: issued.token, expiresAt: issued.expiresAt, caPem: node.caPem };
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

export async function editNodeNetwork(pool: pg.Pool, name: string, patch: NodeNetworkPatch): Promise<NodeRow> {
  const node = await findLiveNodeByName(pool, name);
  if (!node) throw notFound(name);
  const updated = await updateNodeNetwork(pool, node.id, patch);
  if (!updated) throw notFound(name);
  return updated;
}

export async function deleteNode(pool: pg.Pool, name: string, now: Date = new Date()): Promise<NodeRow> {
  return withTransaction(pool, async (client) => {
    const node = await findLiveNodeByName(client, name, { forUpdate: true });
    if (!node) throw notFound(name);
    await markNodeDeleted(client, node.id, now);
    await invalidateNodeTokens(client, node.id, now);
    await revokeNodeCredentials(client, node.id, { notify: false, now });
    await notifyNodeEvent(client, { type: 'node-deleted', nodeId: node.id });
    return node;
  });
}
