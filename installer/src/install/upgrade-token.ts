/**
 * Redeems an upgrade token (`POST /api/enroll/upgrade`): the control plane checks that the token is
 * an unused upgrade token of the node installed here and that the package is the version it pins
 * (its own), and marks the token used. The answer is validated before anything is switched. The
 * host checks already asked the preflight (reachability, version, clock), so this is one call.
 */
import os from 'node:os';
import { z } from 'zod';
import { PROTOCOL_VERSION } from '../../../proto/src/protocol-version.js';
import { controlPlaneRefusal, controlPlaneTransportError, parseControlPlaneUrl } from '../../../edge-node/src/enroll/enroll.js';
import { EnrollError } from '../../../edge-node/src/enroll/enroll-errors.js';
import { requestJson } from '../../../edge-node/src/enroll/https-json.js';
import type { JsonResponse } from '../../../edge-node/src/enroll/https-json.js';
import { describeCaFile } from './control-plane-probe.js';
import type { CaFile } from './control-plane-probe.js';

export const UPGRADE_PATH = '/api/enroll/upgrade';
const TIMEOUT_MS = 15_000;
const MAX_RESPONSE_BYTES = 16 * 1024;

export interface UpgradeRedemption {
  controlPlaneUrl: string;
  /** The CA to trust for the control plane (the --ca-file, or the installed one), and where it came from. */
  caPem?: string;
  caFile?: CaFile;
  token: string;
  /** The installed node's id (its data/identity.json): the token must have been issued for it. */
  nodeId: string;
  fromVersion: string;
  toVersion: string;
}

export const upgradeAnswerSchema = z.object({
  nodeId: z.string().min(1).max(128),
  nodeName: z.string().min(1).max(64),
  targetVersion: z.string().min(1).max(64),
  /** The node's `replicas` now (node-edge processes; 1–999): written to etc/node.env by the switch. */
  replicas: z.number().int().min(1).max(999).optional(),
});
export type UpgradeAnswer = z.infer<typeof upgradeAnswerSchema>;

export type UpgradeTokenRedeemer = (req: UpgradeRedemption) => Promise<UpgradeAnswer>;

/** Throws EnrollError (control-plane codes ZN_ERR_CP_* for a refused token) with a line safe to print. */
export const redeemUpgradeToken: UpgradeTokenRedeemer = async (req) => {
  const base = parseControlPlaneUrl(req.controlPlaneUrl);
  let response: JsonResponse;
  try {
    response = await requestJson({
      method: 'POST',
      url: new URL(UPGRADE_PATH.slice(1), base),
      body: {
        token: req.token,
        nodeId: req.nodeId,
        facts: { hostname: os.hostname(), arch: process.arch, version: req.toVersion, fromVersion: req.fromVersion, protocolVersion: PROTOCOL_VERSION },
      },
      ...(req.caPem !== undefined ? { caPem: req.caPem } : {}),
      timeoutMs: TIMEOUT_MS,
      maxResponseBytes: MAX_RESPONSE_BYTES,
    });
  } catch (err) {
    throw controlPlaneTransportError(err, base, req.caFile?.path, req.token, req.caFile === undefined ? undefined : describeCaFile(req.caFile));
  }
  if (response.status === 404) {
    throw new EnrollError('UPGRADE_UNSUPPORTED', `the control plane at ${base.host} does not redeem upgrade tokens (HTTP 404 on ${UPGRADE_PATH}): it runs an older release; upgrade the control plane first`);
  }
  if (response.status !== 200) throw controlPlaneRefusal(response, 'upgrade', req.token, 'the upgrade token');
  const parsed = upgradeAnswerSchema.safeParse(response.body);
  if (!parsed.success) throw new EnrollError('RESPONSE_INVALID', "the control plane's answer to the upgrade token is not usable; nothing was switched");
  if (parsed.data.nodeId !== req.nodeId) throw new EnrollError('RESPONSE_INVALID', `the control plane answered for node ${parsed.data.nodeId}, not for this host's node ${req.nodeId}; nothing was switched`);
  if (parsed.data.targetVersion !== req.toVersion) {
    throw new EnrollError('ZN_ERR_CP_UPGRADE_VERSION', `the control plane pins node version ${parsed.data.targetVersion}, the package is ${req.toVersion}: use the zenova-node.zpkg of the control plane's release`);
  }
  return parsed.data;
};
