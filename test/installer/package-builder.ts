/**
 * Test-only: real, signed .zpkg packages (through packaging/zpkg/write-package.ts) and a release
 * key pair, plus ways to damage them, for the verifier and install tests.
 */
import { createHash, generateKeyPairSync, sign } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PROTOCOL_VERSION } from '../../proto/src/index.js';
import { productVersion } from '../../proto/src/product-version.js';
import { writePackage } from '../../packaging/zpkg/write-package.js';
import { ZPKG_MAGIC } from '../../installer/src/package/package-format.js';
import { canonicalJson } from '../../installer/src/package/package-manifest.js';
import type { PackageEntry } from '../../packaging/zpkg/write-package.js';
import type { PackageManifest } from '../../installer/src/package/package-manifest.js';

export interface ReleaseKeys {
  publicKeyPem: string;
  privateKey: KeyObject;
}

export function releaseKeys(): ReleaseKeys {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  return { publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(), privateKey };
}

export const LAUNCHER = Buffer.from('#!/bin/sh\nexec echo "zenova-node test launcher" "$@"\n');
/** The release's host CLI, which the install links as /usr/local/bin/zenova. */
export const CLI_LAUNCHER = Buffer.from('#!/bin/sh\nexec echo "zenova test CLI" "$@"\n');

/** What a test package holds unless told otherwise: the launchers and a stand-in app bundle. */
export function defaultPackageEntries(): PackageEntry[] {
  return [
    { path: 'bin/zenova-node', mode: 0o755, content: LAUNCHER },
    { path: 'bin/zenova', mode: 0o755, content: CLI_LAUNCHER },
    { path: 'app/README.txt', mode: 0o644, content: Buffer.from('the node app bundle goes here\n') },
    { path: 'app/lib/data.bin', mode: 0o644, content: Buffer.alloc(200_000, 7) },
  ];
}

export interface BuiltPackage {
  file: string;
  manifest: PackageManifest;
}

export async function buildNodePackage(
  dir: string,
  keys: ReleaseKeys,
  opts: { name?: string; product?: string; version?: string; arch?: 'x86_64' | 'aarch64'; protocolVersion?: number; entries?: PackageEntry[]; requires?: PackageManifest['requires'] } = {},
): Promise<BuiltPackage> {
  const file = join(dir, opts.name ?? 'zenova-node.zpkg');
  const manifest = await writePackage({
    out: file,
    product: opts.product ?? 'zenova-node',
    version: opts.version ?? productVersion(),
    platform: { os: 'linux', arch: opts.arch ?? 'x86_64' },
    protocolVersion: opts.protocolVersion ?? PROTOCOL_VERSION,
    entries: opts.entries ?? defaultPackageEntries(),
    privateKey: keys.privateKey,
    requires: opts.requires,
  });
  return { file, manifest };
}

/**
 * A package whose signed manifest is `manifest` merged over a valid one for the default entries, as a
 * newer release's packaging step could write it (parts this installer's schema does not know), in
 * canonical form and signed with `keys`: writePackage would refuse such a manifest.
 */
export function writeSignedManifestPackage(file: string, keys: ReleaseKeys, manifest: Record<string, unknown>): void {
  const entries = defaultPackageEntries();
  const contents = entries.map((e) => e.content as Buffer);
  const base = {
    product: 'zenova-node',
    version: productVersion(),
    platform: { os: 'linux', arch: 'x86_64' },
    protocolVersion: PROTOCOL_VERSION,
    files: entries.map((e, i) => ({ path: e.path, mode: e.mode, size: contents[i]!.length, sha256: createHash('sha256').update(contents[i]!).digest('hex') })),
    createdAt: new Date().toISOString(),
  };
  const manifestBytes = Buffer.from(canonicalJson({ ...base, ...manifest }));
  const signature = sign(null, manifestBytes, keys.privateKey);
  const u32 = (n: number): Buffer => Buffer.from([n >>> 24, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff]);
  writeFileSync(file, Buffer.concat([ZPKG_MAGIC, u32(manifestBytes.length), manifestBytes, u32(signature.length), signature, ...contents]));
}

/** Flips one bit of the byte at `offset` (negative: from the end). */
export function flipByte(file: string, offset: number): void {
  const bytes = readFileSync(file);
  const at = offset < 0 ? bytes.length + offset : offset;
  bytes[at] = bytes[at]! ^ 0x01;
  writeFileSync(file, bytes);
}

/** The offset of the first occurrence of `text` in the file (to aim a flip at the manifest). */
export function offsetOf(file: string, text: string): number {
  const at = readFileSync(file).indexOf(Buffer.from(text));
  if (at < 0) throw new Error(`${text} not in ${file}`);
  return at;
}
