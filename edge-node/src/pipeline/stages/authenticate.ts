// Stage `authenticate` — the caller's key (`Authorization: Bearer` or `x-api-key`, every header line as sent) from the bundle's
// hashes, and its standing: missing, invalid, revoked, expired and suspended each have their code.
// A config without keys (a local file without apiKeys: stand-alone mode) admits every caller.
import { checkKeyStanding, findCallerKey } from '../../auth/api-key-verifier.js';
import { controlPlaneNow } from '../clock.js';
import type { PipelineContext } from '../context.js';
import { reject } from '../stage.js';
import type { Stage, StageResult } from '../stage.js';

export const authenticateStage: Stage = {
  name: 'authenticate',
  always: false,
  run(ctx: PipelineContext): StageResult {
    const config = ctx.config;
    if (config === undefined) return reject('ZN_ERR_NODE_NOT_READY');
    if (config.apiKeys === null) return undefined;
    const found = findCallerKey(config.apiKeys, ctx.http.rawHeaders);
    if (!found.ok) return reject(found.code);
    ctx.presentedKey = { id: found.key.id, accountId: found.key.accountId };
    // expiresAt is the control plane's: judged by its time, whatever this host's clock says.
    const standing = checkKeyStanding(config, found.key, controlPlaneNow(ctx.clock));
    if (!standing.ok) return reject(standing.code);
    ctx.key = standing.key;
    return undefined;
  },
};
