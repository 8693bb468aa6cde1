/**
 * How the installer and `zenova status` ask node-edge for /readyz when its caller port serves
 * HTTPS: on loopback, trusting exactly the certificate file the node serves (its leaf, and the
 * intermediates after it, as trust anchors), and accepting only a server that presents that very
 * leaf. Nothing is relaxed: the chain is verified (expiry included) and the peer is pinned to the
 * installed certificate, which no other server on the host holds; the SNI names the certificate's
 * first DNS name, as a caller's would. The probe never sets rejectUnauthorized:false; only
 * servedCertificate does, to name what a refused node serves (see there).
 */
import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import tls from 'node:tls';
import type { PeerCertificate } from 'node:tls';
import { Agent } from 'undici';
import { readNodeEnv } from './env-file.js';
import { onHost } from './install-layout.js';
import type { InstallLayout } from './install-layout.js';

/** The DNS names in a certificate's subjectAltName. */
function dnsNames(cert: X509Certificate): string[] {
  return (cert.subjectAltName ?? '').split(',').map((s) => s.trim()).filter((s) => s.startsWith('DNS:')).map((s) => s.slice(4));
}

function certificateBlocks(certPem: string): string[] {
  return certPem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
}

/** The file's first certificate (the leaf the node serves). */
export function installedLeaf(certPem: string): X509Certificate {
  const leafBlock = certificateBlocks(certPem)[0];
  if (leafBlock === undefined) throw new Error('the node certificate file holds no PEM certificate');
  return new X509Certificate(leafBlock);
}

/** The SNI a caller would send: the leaf's first DNS name that is not a wildcard. */
function probeServername(leaf: X509Certificate): string | undefined {
  return dnsNames(leaf).find((name) => !name.includes('*'));
}

/** An undici dispatcher for https://127.0.0.1 or https://[::1] that trusts only `certPem` (the node's certificate file). */
export function loopbackTlsAgent(certPem: string): Agent {
  const blocks = certificateBlocks(certPem);
  const leaf = installedLeaf(certPem);
  const servername = probeServername(leaf);
  return new Agent({
    connect: {
      ca: blocks,
      // The leaf itself is an anchor: its issuer's root may be in no file on this host.
      allowPartialTrustChain: true,
      ...(servername !== undefined ? { servername } : {}),
      // The name check becomes a pin: the server must present the installed leaf.
      checkServerIdentity: (_host: string, peer: PeerCertificate) =>
        peer.fingerprint256 === leaf.fingerprint256 ? undefined : Object.assign(new Error(`the server on loopback presented another certificate (${peer.fingerprint256}) than the node's (${leaf.fingerprint256})`), { code: CERT_PIN_MISMATCH }),
    },
  });
}

/** The code of the probe's refusal of a server that presents another leaf than the installed one. */
const CERT_PIN_MISMATCH = 'ZENOVA_CERT_PIN_MISMATCH';

/** Verification codes (OpenSSL's, as Node reports them) that mean the chain's issuer is not trusted. */
const UNTRUSTED_ISSUER_CODES = new Set(['UNABLE_TO_GET_ISSUER_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'CERT_UNTRUSTED', 'CERT_REJECTED', 'INVALID_CA']);
const CERT_REFUSAL_CODES = new Set([...UNTRUSTED_ISSUER_CODES, 'CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID', 'CERT_SIGNATURE_FAILURE', 'CERT_CHAIN_TOO_LONG', 'ERR_TLS_CERT_ALTNAME_INVALID', CERT_PIN_MISMATCH]);

/** The probe's error code when it refused the server's certificate (the node answered TLS), else undefined. */
export function certificateRefusalCode(err: unknown): string | undefined {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code !== undefined && CERT_REFUSAL_CODES.has(code) ? code : undefined;
}

/**
 * The leaf the server at host:port presents, or undefined when no TLS handshake completes within
 * `timeoutMs`. rejectUnauthorized:false on purpose and only here: the probe has already refused this
 * server, and this handshake reads its certificate to say why (expired, another than the file);
 * nothing is sent over it and no answer is taken from it.
 */
export async function servedCertificate(host: string, port: number, installedCertPem: string, timeoutMs: number): Promise<X509Certificate | undefined> {
  const servername = probeServername(installedLeaf(installedCertPem));
  return new Promise((resolve) => {
    const socket = tls.connect({ host, port, rejectUnauthorized: false, ...(servername !== undefined ? { servername } : {}) });
    const done = (cert: X509Certificate | undefined): void => {
      socket.destroy();
      resolve(cert);
    };
    socket.once('secureConnect', () => done(socket.getPeerX509Certificate()));
    socket.once('error', () => done(undefined));
    socket.setTimeout(timeoutMs, () => done(undefined));
  });
}

/**
 * What to do about a node whose certificate the probe refused (`code`), given the leaf it serves
 * (`served`, undefined when it could not be read) and the installed file's: an expired served
 * certificate (and whether the file is renewed already), a node still serving another certificate
 * than the file (renewed, not reloaded), or an issuer the file does not vouch for.
 */
export function certificateRefusal(code: string, installed: InstalledTlsCert, served: X509Certificate | undefined, now = new Date()): string {
  const leaf = installedLeaf(installed.certPem);
  const fileNotAfter = new Date(leaf.validTo);
  if (served !== undefined) {
    const servedNotAfter = new Date(served.validTo);
    const other = served.fingerprint256 !== leaf.fingerprint256;
    if (servedNotAfter.getTime() <= now.getTime()) {
      return other && fileNotAfter.getTime() > now.getTime()
        ? `the node's ingress certificate (served) expired at ${servedNotAfter.toISOString()}; ${installed.file} is renewed already (valid until ${fileNotAfter.toISOString()}): \`systemctl reload node-edge\` to serve it`
        : `the node's ingress certificate (served) expired at ${servedNotAfter.toISOString()}: renew ${installed.file} and \`systemctl reload node-edge\``;
    }
    if (other) return `the node serves another certificate than ${installed.file}: reload node-edge (SIGHUP: \`systemctl reload node-edge\`) to take the new one`;
  }
  if (UNTRUSTED_ISSUER_CODES.has(code)) return `the node's certificate has an issuer the probe does not trust (${code}); it trusts only ${installed.file} (the certificate and the intermediates after it)`;
  return `the node's certificate was refused (${code}), checked against ${installed.file}`;
}

/** The node's certificate file: its path on the node (as node.env names it) and its PEM. */
export interface InstalledTlsCert {
  file: string;
  certPem: string;
}

/**
 * The certificate file an installed node serves callers with (ZENOVA_NODE_TLS_CERT_FILE in its env
 * file), or undefined when it serves plain HTTP. A named file that cannot be read is reported, not
 * taken for plain HTTP.
 */
export async function installedTlsCertFile(hostRoot: string, layout: InstallLayout): Promise<InstalledTlsCert | undefined> {
  const file = (await readNodeEnv(onHost(hostRoot, layout.envFile))).ZENOVA_NODE_TLS_CERT_FILE;
  if (file === undefined || file === '') return undefined;
  try {
    return { file, certPem: await readFile(onHost(hostRoot, file), 'utf8') };
  } catch (err) {
    throw new Error(`cannot read the node's TLS certificate ${file} (ZENOVA_NODE_TLS_CERT_FILE in ${layout.envFile}): ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { cause: err });
  }
}

/** installedTlsCertFile's PEM. */
export async function installedTlsCert(hostRoot: string, layout: InstallLayout): Promise<string | undefined> {
  return (await installedTlsCertFile(hostRoot, layout))?.certPem;
}
