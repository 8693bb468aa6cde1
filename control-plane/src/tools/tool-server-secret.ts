/**
 * Tool server secrets at rest: sealed with the secret box (ZENOVA_SECRET_ENC_KEY) under the context
 * `tool-server-secret:<tool server id>`, so a sealed secret copied onto another row (or an
 * upstream's) fails to open instead of being sent to the wrong server.
 */
import type { SecretBox } from '../crypto/secret-box.js';
import { zenovaError } from '../errors.js';

export function toolServerSecretContext(toolServerId: string): string {
  return `tool-server-secret:${toolServerId}`;
}

export function sealToolServerSecret(secretBox: SecretBox | undefined, toolServerId: string, secret: string): Buffer {
  if (!secretBox) throw zenovaError('ZN_ERR_CP_SECRETS_UNAVAILABLE');
  return secretBox.seal(secret, toolServerSecretContext(toolServerId));
}

/** The plaintext secret (for the node's bundle only); throws SecretBoxError on a wrong key or damage. */
export function openToolServerSecret(secretBox: SecretBox, toolServerId: string, sealed: Uint8Array): string {
  return secretBox.open(sealed, toolServerSecretContext(toolServerId)).toString('utf8');
}
