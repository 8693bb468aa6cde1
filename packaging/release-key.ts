/**
 * The release signing key pair (Ed25519). The private key signs every package's manifest and stays
 * with the release owner (never in the repository); the public key ships beside the installer as
 * release-signing-key.pub.pem. Create one with:
 *
 *   npx tsx packaging/release-key.ts --out DIR     (writes DIR/zenova-release-signing.key 0600 and
 *                                                    DIR/release-signing-key.pub.pem)
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

export const PRIVATE_KEY_FILE = 'zenova-release-signing.key';
export const PUBLIC_KEY_FILE = 'release-signing-key.pub.pem';

export interface ReleaseSigningKey {
  privateKey: KeyObject;
  publicKeyPem: string;
}

/** Writes a new key pair into `dir`; refuses to overwrite an existing private key. */
export function createReleaseKey(dir: string): { privateKeyFile: string; publicKeyFile: string } {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const privateKeyFile = path.join(dir, PRIVATE_KEY_FILE);
  const publicKeyFile = path.join(dir, PUBLIC_KEY_FILE);
  if (existsSync(privateKeyFile)) throw new Error(`${privateKeyFile} exists: a release key is never replaced by accident`);
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  writeFileSync(privateKeyFile, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600, flag: 'wx' });
  writeFileSync(publicKeyFile, publicKey.export({ type: 'spki', format: 'pem' }), { mode: 0o644 });
  return { privateKeyFile, publicKeyFile };
}

/** Loads a PKCS#8 PEM private key and derives the public key that must ship with the installer. */
export function loadReleaseKey(privateKeyFile: string): ReleaseSigningKey {
  const privateKey = createPrivateKey(readFileSync(privateKeyFile));
  if (privateKey.asymmetricKeyType !== 'ed25519') throw new Error(`${privateKeyFile} is not an Ed25519 private key`);
  const publicKeyPem = createPublicKey(privateKey).export({ type: 'spki', format: 'pem' }).toString();
  return { privateKey, publicKeyPem };
}

function main(): void {
  const { values } = parseArgs({ options: { out: { type: 'string' } } });
  if (values.out === undefined) {
    process.stderr.write('Usage: npx tsx packaging/release-key.ts --out DIR\n');
    process.exitCode = 2;
    return;
  }
  const made = createReleaseKey(path.resolve(values.out));
  process.stdout.write(`release signing key: ${made.privateKeyFile} (0600: keep it offline, never commit it)\npublic key:          ${made.publicKeyFile} (ships with the installer; build with --signing-key ${made.privateKeyFile})\n`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
