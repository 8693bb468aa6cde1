/**
 * gRPC metadata the node sends when it opens NodeControl.Connect. Authentication happens on the
 * call, before any message, so a node without a valid credential never gets a session.
 * Keys are lowercase, as gRPC requires.
 */

/** The node id issued at enrollment (Hello.node_id must match it). */
export const NODE_ID_METADATA_KEY = 'x-zenova-node-id';

/** The node's current opaque credential. A secret: never log the metadata. */
export const NODE_CREDENTIAL_METADATA_KEY = 'x-zenova-node-credential';
