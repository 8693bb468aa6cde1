// A node's identity pinned to a fresh config signer, and the signed push of any version of a
// bundle for it: what the tests of the node's config cache (loadEnrolledConfig over a state dir)
// start from.
import type { ConfigPush } from '../../proto/src/index.js';
import type { NodeIdentity } from '../../edge-node/src/state/identity.js';
import type { TestSigner } from './config-fixtures.js';
import { bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';

export const SIGNED_NODE_ID = 'node-under-test';

export interface SignedConfigNode {
  signer: TestSigner;
  identity: NodeIdentity;
  /** Version `version` of a bundle for the node (one new caller key), signed by `signer`. */
  push: (version: number) => ConfigPush;
}

export function signedConfigNode(): SignedConfigNode {
  const signer = createSigner();
  const identity: NodeIdentity = {
    nodeId: SIGNED_NODE_ID,
    nodeName: 'edge-test',
    controlPlaneUrl: 'https://cp.example:8443',
    gateway: { target: '127.0.0.1:1', serverName: 'localhost', caPem: signer.publicKeyPem },
    configSigningPublicKeyPem: signer.publicKeyPem,
    enrolledAt: new Date().toISOString(),
  };
  const push = (version: number): ConfigPush =>
    signedPush(testBundle({ nodeId: SIGNED_NODE_ID, version, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [bundleKey(`key-${version}`, newCallerKey().sha256)] }), signer);
  return { signer, identity, push };
}
