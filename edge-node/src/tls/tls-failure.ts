/**
 * Turns TLS and connection failures into one operator line: what went wrong and what to do.
 * Node reports certificate problems as error codes (https, tls); grpc-js only passes on the
 * message text, so both are recognised.
 */

export type TlsFailureKind = 'untrusted' | 'name-mismatch' | 'expired' | 'refused' | 'not-found' | 'timeout' | 'not-tls' | 'other';

const UNTRUSTED_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
]);

const UNTRUSTED_TEXT = /self[- ]signed certificate|unable to verify the first certificate|unable to get (local )?issuer certificate|certificate signature failure|certificate not trusted/i;
const MISMATCH_TEXT = /does not match certificate's altnames|ERR_TLS_CERT_ALTNAME_INVALID|Hostname\/IP does not match/i;
const EXPIRED_TEXT = /certificate has expired|certificate is not yet valid/i;

/** Finds the most specific failure kind in an error, its `cause` chain and its message. */
export function classifyTlsFailure(err: unknown): TlsFailureKind {
  const seen = new Set<unknown>();
  let current: unknown = err;
  const texts: string[] = [];
  while (current !== undefined && current !== null && !seen.has(current)) {
    seen.add(current);
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') {
      if (UNTRUSTED_CODES.has(code)) return 'untrusted';
      if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return 'name-mismatch';
      if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID') return 'expired';
      if (code === 'ECONNREFUSED') return 'refused';
      if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'not-found';
      if (code === 'ETIMEDOUT' || code === 'UND_ERR_CONNECT_TIMEOUT') return 'timeout';
      if (code === 'EPROTO' || code === 'ERR_SSL_WRONG_VERSION_NUMBER') return 'not-tls';
    }
    if (current instanceof Error) texts.push(current.message);
    else if (typeof current === 'string') texts.push(current);
    current = (current as { cause?: unknown }).cause;
  }
  const text = texts.join(' ');
  if (MISMATCH_TEXT.test(text)) return 'name-mismatch';
  if (UNTRUSTED_TEXT.test(text)) return 'untrusted';
  if (EXPIRED_TEXT.test(text)) return 'expired';
  if (/ECONNREFUSED|connection refused/i.test(text)) return 'refused';
  if (/ENOTFOUND|EAI_AGAIN|getaddrinfo/i.test(text)) return 'not-found';
  if (/ETIMEDOUT|timed out/i.test(text)) return 'timeout';
  if (/wrong version number|packet length too long|EPROTO/i.test(text)) return 'not-tls';
  return 'other';
}

export interface TlsPeer {
  /** "the control plane" or "the gateway". */
  what: string;
  /** Host name the certificate must match. */
  host: string;
  /** host:port or URL, as the operator knows it. */
  address: string;
  /** How trust is configured, for advice: e.g. "--ca-file" or "the CA saved at enrollment". */
  trustSource: string;
  /** What to do when the trust source is the wrong one; absent when the caller advises separately. */
  trustAdvice?: string;
}

/** One line for an operator, or undefined when `kind` is not a TLS/connection failure. */
export function explainTlsFailure(kind: TlsFailureKind, peer: TlsPeer): string | undefined {
  switch (kind) {
    case 'untrusted':
      return `${peer.what}'s certificate is not trusted (checked against ${peer.trustSource})${peer.trustAdvice !== undefined ? `: ${peer.trustAdvice}` : ''}`;
    case 'name-mismatch':
      return `host name mismatch: ${peer.what}'s certificate is not valid for "${peer.host}"; use an address its certificate names, or reissue the certificate with that name`;
    case 'expired':
      return `${peer.what}'s certificate has expired or is not yet valid; check this host's clock, or renew the certificate`;
    case 'refused':
      return `${peer.what} at ${peer.address} refused the connection; is it running and is the port right?`;
    case 'not-found':
      return `the host name of ${peer.what} (${peer.host}) does not resolve; check the address and DNS`;
    case 'timeout':
      return `${peer.what} at ${peer.address} did not answer in time; check the address and any firewall in between`;
    case 'not-tls':
      return `${peer.what} at ${peer.address} did not speak TLS; is this the HTTPS port?`;
    case 'other':
      return undefined;
  }
}
