/**
 * How the installer and `zenova status` ask node-edge for /readyz when its caller port serves
 * HTTPS: on loopback, trusting exactly the certificate file the node serves (its leaf, and the
 * intermediates after it, as trust anchors), and accepting only a server that presents that very
 * leaf. Nothing is relaxed: the chain is verified (expiry included) and the peer is pinned to the
 * installed certificate, which no other server on the host holds; the SNI names the certificate's
 * first DNS name, as a caller's would. Never rejectUnauthorized:false.
 */
import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { PeerCertificate } from 'node:tls';
import { Agent } from 'undici';
import { readNodeEnv } from './env-file.js';
import { onHost } from './install-layout.js';
import type { InstallLayout } from './install-layout.js';

/** The DNS names in a certificate's subjectAltName. */
function dnsNames(cert: X509Certificate): string[] {
  return (cert.subjectAltName ?? '').split(',').map((s) => s.trim()).filter((s) => s.startsWith('DNS:')).map((s) => s.slice(4));
}

/** An undici dispatcher for https://127.0.0.1 or https://[::1] that trusts only `certPem` (the node's certificate file). */
export function loopbackTlsAgent(certPem: string): Agent {
  const blocks = certPem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  const leafBlock = blocks[0];
  if (leafBlock === undefined) throw new Error('the node certificate file holds no PEM certificate');
  const leaf = new X509Certificate(leafBlock);
  const servername = dnsNames(leaf).find((name) => !name.includes('*'));
  return new Agent({
    connect: {
      ca: blocks,
      // The leaf itself is an anchor: its issuer's root may be in no file on this host.
      allowPartialTrustChain: true,
      ...(servername !== undefined ? { servername } : {}),
      // The name check becomes a pin: the server must present the installed leaf.
      checkServerIdentity: (_host: string, peer: PeerCertificate) =>
        peer.fingerprint256 === leaf.fingerprint256 ? undefined : new Error(`the server on loopback presented another certificate (${peer.fingerprint256}) than the node's (${leaf.fingerprint256})`),
    },
  });
}

/**
 * The certificate file an installed node serves callers with (ZENOVA_NODE_TLS_CERT_FILE in its env
 * file), or undefined when it serves plain HTTP. A named file that cannot be read is reported, not
 * taken for plain HTTP.
 */
export async function installedTlsCert(hostRoot: string, layout: InstallLayout): Promise<string | undefined> {
  const file = (await readNodeEnv(onHost(hostRoot, layout.envFile))).ZENOVA_NODE_TLS_CERT_FILE;
  if (file === undefined || file === '') return undefined;
  try {
    return await readFile(onHost(hostRoot, file), 'utf8');
  } catch (err) {
    throw new Error(`cannot read the node's TLS certificate ${file} (ZENOVA_NODE_TLS_CERT_FILE in ${layout.envFile}): ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { cause: err });
  }
}
