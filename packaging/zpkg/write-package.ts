/**
 * Writes a .zpkg (format: installer/src/package/package-format.ts) from files in memory or on
 * disk, signed with an Ed25519 private key. Used by `npm run package` and by tests that need real
 * packages (good and tampered ones).
 */
import { createHash, sign } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { open, readFile } from 'node:fs/promises';
import { ED25519_SIGNATURE_BYTES, ZPKG_MAGIC } from '../../installer/src/package/package-format.js';
import { canonicalManifestBytes, packageManifestSchema } from '../../installer/src/package/package-manifest.js';
import type { PackageManifest } from '../../installer/src/package/package-manifest.js';

export interface PackageEntry {
  path: string;
  mode: number;
  /** The bytes, or a file to read them from. */
  content: Buffer | { file: string };
}

export interface WritePackageOptions {
  out: string;
  product: string;
  version: string;
  platform: PackageManifest['platform'];
  protocolVersion: number;
  entries: PackageEntry[];
  privateKey: KeyObject;
  createdAt?: Date;
  /** The glibc floor of the native files (packaging/libc-floor.ts); omitted when there are none. */
  requires?: PackageManifest['requires'];
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n, 0);
  return b;
}

/** Writes the package and returns its manifest. */
export async function writePackage(opts: WritePackageOptions): Promise<PackageManifest> {
  const contents: Buffer[] = [];
  for (const entry of opts.entries) contents.push(Buffer.isBuffer(entry.content) ? entry.content : await readFile(entry.content.file));
  const manifest = packageManifestSchema.parse({
    product: opts.product,
    version: opts.version,
    platform: opts.platform,
    protocolVersion: opts.protocolVersion,
    files: opts.entries.map((e, i) => ({ path: e.path, mode: e.mode, size: contents[i]!.length, sha256: createHash('sha256').update(contents[i]!).digest('hex') })),
    createdAt: (opts.createdAt ?? new Date()).toISOString(),
    requires: opts.requires,
  });
  const manifestBytes = canonicalManifestBytes(manifest);
  const signature = sign(null, manifestBytes, opts.privateKey);
  if (signature.length !== ED25519_SIGNATURE_BYTES) throw new Error('the signing key is not an Ed25519 key');
  const handle = await open(opts.out, 'w', 0o644);
  try {
    await handle.writeFile(Buffer.concat([ZPKG_MAGIC, u32(manifestBytes.length), manifestBytes, u32(signature.length), signature]));
    for (const c of contents) await handle.write(c);
    await handle.sync();
  } finally {
    await handle.close();
  }
  return manifest;
}
