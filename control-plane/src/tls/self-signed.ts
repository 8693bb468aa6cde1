/**
 * A small self-signed PKI for the product: a CA and the server certificates it issues (the node
 * gateway's identity, the dev stack's console HTTPS). ECDSA P-256 keeps generation fast on small
 * machines and is accepted by every TLS stack we talk to. Everything goes in and out as PEM.
 */
import 'reflect-metadata';
import { X509Certificate as NodeX509Certificate, createPrivateKey, webcrypto } from 'node:crypto';
import { isIP } from 'node:net';
import * as x509 from '@peculiar/x509';

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

x509.cryptoProvider.set(webcrypto);

const KEY_ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const SIGNING_ALGORITHM = { name: 'ECDSA', hash: 'SHA-256' } as const;
const DAY_MS = 24 * 60 * 60_000;
// Backdated a little so a fresh certificate is valid on a peer whose clock is a few minutes behind.
const BACKDATE_MS = 5 * 60_000;
export const CA_VALIDITY_DAYS = 3650;

export interface PemKeyPair {
  certPem: string;
  /** PKCS#8 PEM. */
  keyPem: string;
}

export interface ServerCertOptions {
  dnsNames?: readonly string[];
  ipAddresses?: readonly string[];
  validityDays: number;
  /** Issue as of this moment instead of now (tests build already-expired certificates with it). */
  issuedAt?: Date;
}

async function generateKeys(): Promise<CryptoKeyPair> {
  return webcrypto.subtle.generateKey(KEY_ALGORITHM, true, ['sign', 'verify']);
}

async function exportPrivateKeyPem(key: CryptoKey): Promise<string> {
  const der = await webcrypto.subtle.exportKey('pkcs8', key);
  return x509.PemConverter.encode(der, 'PRIVATE KEY');
}

async function importSigningKey(keyPem: string): Promise<CryptoKey> {
  // node:crypto reads any PEM flavour (SEC1 "EC PRIVATE KEY" too); webcrypto wants PKCS#8 DER.
  const der = createPrivateKey(keyPem).export({ type: 'pkcs8', format: 'der' });
  return webcrypto.subtle.importKey('pkcs8', der, KEY_ALGORITHM, false, ['sign']);
}

function validity(days: number, issuedAt = new Date()): { notBefore: Date; notAfter: Date } {
  const now = issuedAt.getTime();
  return { notBefore: new Date(now - BACKDATE_MS), notAfter: new Date(now + days * DAY_MS) };
}

/** A fresh self-signed CA (its own key pair), valid for ten years unless told otherwise. */
export async function createCa(commonName: string, opts: { validityDays?: number; issuedAt?: Date } = {}): Promise<PemKeyPair> {
  const keys = await generateKeys();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    name: [{ CN: [commonName] }],
    keys,
    signingAlgorithm: SIGNING_ALGORITHM,
    ...validity(opts.validityDays ?? CA_VALIDITY_DAYS, opts.issuedAt),
    extensions: [
      // pathLength 0: this CA signs server certificates only, never other CAs.
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { certPem: cert.toString('pem'), keyPem: await exportPrivateKeyPem(keys.privateKey) };
}

/** A TLS server certificate signed by `ca`, valid for the given DNS names and IP addresses. */
export async function issueServerCert(ca: PemKeyPair, opts: ServerCertOptions): Promise<PemKeyPair> {
  const dnsNames = [...(opts.dnsNames ?? [])];
  const ipAddresses = [...(opts.ipAddresses ?? [])];
  if (dnsNames.length + ipAddresses.length === 0) throw new Error('a server certificate needs at least one DNS name or IP address');
  const bad = ipAddresses.find((ip) => isIP(ip) === 0);
  if (bad !== undefined) throw new Error(`'${bad}' is not an IP address`);
  const caCert = new x509.X509Certificate(ca.certPem);
  const { notBefore, notAfter } = validity(opts.validityDays, opts.issuedAt);
  const keys = await generateKeys();
  const cert = await x509.X509CertificateGenerator.create({
    subject: [{ CN: [dnsNames[0] ?? ipAddresses[0] ?? 'server'] }],
    issuer: caCert.subject,
    publicKey: keys.publicKey,
    signingKey: await importSigningKey(ca.keyPem),
    signingAlgorithm: SIGNING_ALGORITHM,
    notBefore,
    // Never outlives its CA: a chain is only as valid as its shortest-lived link.
    notAfter: new Date(Math.min(notAfter.getTime(), caCert.notAfter.getTime())),
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension([
        ...dnsNames.map((value) => ({ type: 'dns' as const, value })),
        ...ipAddresses.map((value) => ({ type: 'ip' as const, value })),
      ]),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      await x509.AuthorityKeyIdentifierExtension.create(caCert.publicKey),
    ],
  });
  return { certPem: cert.toString('pem'), keyPem: await exportPrivateKeyPem(keys.privateKey) };
}

/** Splits hosts into the DNS names and IP addresses a certificate's SAN lists them as. */
export function sanFor(hosts: readonly string[]): { dnsNames: string[]; ipAddresses: string[] } {
  return {
    dnsNames: hosts.filter((h) => isIP(h) === 0),
    ipAddresses: hosts.filter((h) => isIP(h) !== 0),
  };
}

/** True when a TLS client connecting to `host` would accept this certificate's names (SAN only). */
export function certCovers(certPem: string, host: string): boolean {
  const cert = new NodeX509Certificate(certPem);
  if (isIP(host) !== 0) return cert.checkIP(host) !== undefined;
  // Like node:tls, the subject CN is not consulted: modern clients read the SAN only.
  return cert.checkHost(host, { subject: 'never' }) !== undefined;
}

export function certNotAfter(certPem: string): Date {
  return new Date(new NodeX509Certificate(certPem).validTo);
}

export function certNotBefore(certPem: string): Date {
  return new Date(new NodeX509Certificate(certPem).validFrom);
}

/** SHA-256 fingerprint of the certificate, AA:BB:… as openssl prints it. */
export function certFingerprint(certPem: string): string {
  return new NodeX509Certificate(certPem).fingerprint256;
}

/** True when `keyPem` is the private half of the certificate's public key. */
export function keyMatchesCert(certPem: string, keyPem: string): boolean {
  return new NodeX509Certificate(certPem).checkPrivateKey(createPrivateKey(keyPem));
}

/** True when `issuerPem` signed `certPem` (names chain and the signature verifies). */
export function isIssuedBy(certPem: string, issuerPem: string): boolean {
  const cert = new NodeX509Certificate(certPem);
  const issuer = new NodeX509Certificate(issuerPem);
  return cert.checkIssued(issuer) && cert.verify(issuer.publicKey);
}

/** Every certificate in a PEM bundle, in order, each re-encoded as its own PEM block. */
export function splitPemCertificates(bundle: string): string[] {
  const blocks = bundle.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  return blocks.map((block) => new NodeX509Certificate(block).toString());
}
