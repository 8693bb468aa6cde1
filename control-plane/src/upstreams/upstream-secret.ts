/**
 * Provider secrets at rest: sealed with the secret box (ZENOVA_SECRET_ENC_KEY) under the context
 * `upstream-secret:<upstream id>`, so a sealed secret copied onto another upstream's row fails to
 * open instead of being served for the wrong provider.
 */
import type { SecretBox } from '../crypto/secret-box.js';
import { zenovaError } from '../errors.js';

export function upstreamSecretContext(upstreamId: string): string {
  return `upstream-secret:${upstreamId}`;
}

export function sealUpstreamSecret(secretBox: SecretBox | undefined, upstreamId: string, secret: string): Buffer {
  if (!secretBox) throw zenovaError('ZN_ERR_CP_SECRETS_UNAVAILABLE');
  return secretBox.seal(secret, upstreamSecretContext(upstreamId));
}

/** The plaintext secret (for the node's bundle only); throws SecretBoxError on a wrong key or damage. */
export function openUpstreamSecret(secretBox: SecretBox, upstreamId: string, sealed: Uint8Array): string {
  return secretBox.open(sealed, upstreamSecretContext(upstreamId)).toString('utf8');
}
