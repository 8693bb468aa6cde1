/**
 * Turns a failed connection to the control plane (refused, unresolvable, TLS not trusted, wrong
 * host name, plain HTTP against HTTPS, …) into one line that says what to check. Verification is
 * never switched off; the advice is always to give the right CA or URL.
 */
import { CA_VARIABLE, URL_VARIABLE } from './connection-settings.js';

const UNTRUSTED = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
]);

/** The error codes along an error's cause chain (undici and fetch wrap the socket's error). */
function codesOf(err: unknown): string[] {
  const codes: string[] = [];
  let current: unknown = err;
  for (let depth = 0; depth < 5 && current !== null && typeof current === 'object'; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') codes.push(code);
    current = (current as { cause?: unknown }).cause;
  }
  return codes;
}

function messagesOf(err: unknown): string {
  const parts: string[] = [];
  let current: unknown = err;
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    parts.push(current.message);
    current = current.cause;
  }
  return parts.join(' / ');
}

export interface ConnectionTarget {
  displayUrl: string;
  host: string;
  caFile: string | undefined;
}

export function describeConnectionFailure(err: unknown, target: ConnectionTarget): string {
  const codes = codesOf(err);
  const has = (...wanted: string[]): boolean => codes.some((c) => wanted.includes(c));
  const untrusted = codes.find((c) => UNTRUSTED.has(c));
  const at = `the control plane at ${target.displayUrl}`;
  if (untrusted !== undefined) {
    const fix = target.caFile === undefined
      ? `set ${CA_VARIABLE} to the PEM file of the CA that issued it`
      : `it is not issued by the CA in ${CA_VARIABLE} (${target.caFile}); point ${CA_VARIABLE} at the right CA`;
    return `TLS verification of ${at} failed: its certificate is not trusted (${untrusted}); ${fix}`;
  }
  if (has('ERR_TLS_CERT_ALTNAME_INVALID')) {
    return `TLS verification of ${at} failed: its certificate is not valid for ${target.host}; use the host name the certificate was issued for in ${URL_VARIABLE}`;
  }
  if (has('CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID')) {
    return `TLS verification of ${at} failed: its certificate is ${has('CERT_HAS_EXPIRED') ? 'expired' : 'not valid yet'} (check both clocks, renew the certificate)`;
  }
  if (has('ERR_SSL_WRONG_VERSION_NUMBER') || /wrong version number/i.test(messagesOf(err))) {
    return `cannot talk TLS to ${at}: it does not answer HTTPS on that port; check the URL's scheme and port`;
  }
  if (has('ECONNREFUSED')) return `cannot reach ${at}: connection refused (is it running, and is the port right?)`;
  if (has('ENOTFOUND', 'EAI_AGAIN')) return `cannot reach ${at}: the host name ${target.host} does not resolve`;
  if (has('EHOSTUNREACH', 'ENETUNREACH')) return `cannot reach ${at}: no route to the host`;
  if (has('UND_ERR_CONNECT_TIMEOUT', 'ETIMEDOUT')) return `cannot reach ${at}: the connection timed out (check the address and firewalls)`;
  if (has('UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT')) return `${at} did not answer in time; try again, and check its health`;
  if (has('ECONNRESET', 'UND_ERR_SOCKET', 'EPIPE')) {
    return `the connection to ${at} was closed before it answered (if it serves HTTPS, the URL must start with https://)`;
  }
  if (codes.some((c) => c.startsWith('ERR_TLS') || c.startsWith('ERR_SSL') || c === 'EPROTO')) {
    return `the TLS handshake with ${at} failed (${codes.join(', ')})`;
  }
  const detail = codes[0] ?? (err instanceof Error ? err.message : String(err));
  return `cannot reach ${at}: ${detail}`;
}
