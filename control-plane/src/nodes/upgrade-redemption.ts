/**
 * Upgrade redemption: `zenova install node … --upgrade` on an offline or failed node's host
 * (DESIGN §8, seed 004 §9.6) redeems an upgrade token before it installs the new release. The
 * answer is the go-ahead: the node (from the host's identity.json) and the version to install.
 *
 * The control plane pins the node version to its own (productVersion()); a package of another
 * version is refused before the token is touched. The token must be an upgrade token of the very
 * node installed on the host; anything else rolls back and leaves the token usable. Nothing else
 * changes: the node keeps its identity and credentials, and reports its new version in its hello.
 *
 * There is no redemption-key retry here (unlike enrollment.ts): an answer lost after the commit
 * means issuing a new upgrade command.
 */
import type pg from 'pg';
import { z } from 'zod';
import { zenovaError } from '../errors.js';
import { productVersion } from '../../../proto/src/product-version.js';
import { assertCompatibleProtocol, factsRule, hostFactRules, redeemFailureError, replicasAnswerSchema, stated, tokenRule } from './enrollment.js';
import { redeemInstallToken } from './install-tokens.js';
import { notifyNodeEvent } from './node-events.js';
import { findNodeById } from './node-repository.js';
import { withTransaction } from './with-transaction.js';

const NODE_ID_RULE = 'must be the node id of data/identity.json (1 to 128 characters)';

export const upgradeRequestSchema = z.strictObject({
  token: tokenRule,
  /** The node id in the installed node's data/identity.json. */
  nodeId: z.string(stated(NODE_ID_RULE)).min(1, stated(NODE_ID_RULE)).max(128, stated(NODE_ID_RULE)),
  facts: z.strictObject({
    hostname: hostFactRules.hostname,
    arch: hostFactRules.arch,
    /** The new package's version. */
    version: hostFactRules.version,
    /** The installed release's version. */
    fromVersion: hostFactRules.version,
    protocolVersion: hostFactRules.protocolVersion,
  }, factsRule('must be an object of hostname, arch, version, fromVersion and protocolVersion')),
});

export type UpgradeRequest = z.output<typeof upgradeRequestSchema>;

export const upgradeResponseSchema = z.object({
  nodeId: z.string().min(1).max(128),
  nodeName: z.string().min(1).max(64),
  targetVersion: z.string().min(1).max(64),
  /** The node's `replicas` now: the installer writes it to etc/node.env, so an upgrade applies a changed count. */
  replicas: replicasAnswerSchema,
});

export type UpgradeResponse = z.infer<typeof upgradeResponseSchema>;

export async function redeemUpgradeToken(pool: pg.Pool, request: UpgradeRequest, now: Date = new Date()): Promise<UpgradeResponse> {
  const { facts } = request;
  assertCompatibleProtocol(facts.protocolVersion);
  const targetVersion = productVersion();
  if (facts.version !== targetVersion) {
    throw zenovaError(
      'ZN_ERR_CP_UPGRADE_VERSION',
      `The node package is version ${facts.version}, but this control plane (version ${targetVersion}) pins its nodes to its own ` +
        `version; upgrade with the zenova-node.zpkg of version ${targetVersion}. The token was not used.`,
    );
  }
  return withTransaction(pool, async (client) => {
    const redeemed = await redeemInstallToken(client, request.token, ['upgrade'], now);
    if (!redeemed.ok) throw redeemFailureError(redeemed, 'upgrade');
    // Thrown inside the transaction, so the redemption rolls back. The other node's name is not
    // said: the token alone must not tell which node it belongs to.
    if (redeemed.nodeId !== request.nodeId) {
      throw zenovaError(
        'ZN_ERR_CP_TOKEN_WRONG_NODE',
        'This upgrade token was issued for another node than the one installed on this host (data/identity.json); ' +
          "issue an upgrade command for this host's node and run that. The token was not used.",
      );
    }
    // Live: redeemInstallToken refused a deleted node, and holds its row lock until the commit.
    const node = (await findNodeById(client, redeemed.nodeId))!;
    await notifyNodeEvent(client, {
      type: 'upgrade-started', nodeId: redeemed.nodeId, fromVersion: facts.fromVersion, toVersion: targetVersion, hostname: facts.hostname,
    });
    return { nodeId: redeemed.nodeId, nodeName: node.name, targetVersion, replicas: node.replicas };
  });
}
