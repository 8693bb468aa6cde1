/**
 * The node↔control-plane protocol version: one integer, bumped on every wire change that an older
 * peer cannot ignore. The changelog is proto/PROTOCOL.md.
 */
export const PROTOCOL_VERSION = 1;

/**
 * The highest protocol version either side takes as a fact (enrollment, Hello). Far above any
 * release, and inside the integer column the control plane records it in: a higher one is refused
 * as incompatible rather than failing where it is stored.
 */
export const MAX_PROTOCOL_VERSION_FACT = 1_000_000;

/** ErrorDetail.code of the Refusal sent to a peer whose protocol version is not compatible. */
export const PROTOCOL_INCOMPATIBLE_CODE = 'PROTOCOL_INCOMPATIBLE';

/**
 * Whether a peer speaking `peerVersion` can share a control stream with this build.
 *
 * Equal versions only, for now: v1 is the first version, so there is no older peer to stay
 * compatible with, and a newer peer by definition changed something we cannot ignore (otherwise it
 * would not have bumped). When a later version keeps reading an older one, widen this to a
 * declared range (e.g. MIN_COMPATIBLE_PROTOCOL_VERSION..PROTOCOL_VERSION) and say so in PROTOCOL.md.
 */
export function isCompatibleProtocol(peerVersion: number): boolean {
  return Number.isSafeInteger(peerVersion) && peerVersion === PROTOCOL_VERSION;
}

/** Operator-facing explanation of a mismatch, saying which side needs upgrading. */
export function describeProtocolMismatch(local: number, peer: number): string {
  const head = `control protocol mismatch: this side speaks v${local}, the peer speaks v${peer}`;
  if (!Number.isSafeInteger(peer) || peer < 1) return `${head}; the peer sent no valid protocol version`;
  if (peer > local) return `${head}; the peer is newer, upgrade this side`;
  if (peer < local) return `${head}; the peer is older, upgrade the peer`;
  return `${head}; the versions are equal, so they are compatible`;
}
