/**
 * How a release dir is known to be one the installer unpacked: install-node.ts writes the verified
 * package manifest into it (RELEASE_MANIFEST_FILE) before renaming it into releases/<version>, and
 * the install-dir check accepts an existing releases/<version> only when it holds that manifest for
 * that version. Without it, another application's releases/<version>/ would be deleted and replaced
 * (install-dir-contents.ts).
 */
import { randomBytes } from 'node:crypto';
import { lstat, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { extractPackage } from '../package/package-extract.js';
import { MAX_MANIFEST_BYTES } from '../package/package-format.js';
import { PACKAGE_PRODUCT, RELEASE_MANIFEST_FILE, canonicalJson, packageManifestSchema } from '../package/package-manifest.js';
import type { PackageManifest } from '../package/package-manifest.js';

/** Writes the manifest into an unpacked release dir (`physical`); fails if a file of that name is there. */
export async function writeReleaseManifest(physical: string, manifest: PackageManifest): Promise<void> {
  await writeFile(path.join(physical, RELEASE_MANIFEST_FILE), `${canonicalJson(manifest)}\n`, { mode: 0o644, flag: 'wx' });
}

/**
 * Unpacks the verified package into `release` (physical path, releases/<version>): into a partial
 * dir beside it, with the manifest, then renamed into place, so a release dir is whole or absent.
 * An existing one is a release this installer unpacked (a run killed before its rollback; the dir
 * checks refuse any other: install-dir-contents.ts) and is replaced.
 */
export async function unpackRelease(release: string, packageFile: string, manifest: PackageManifest, dataOffset: number): Promise<void> {
  // A run killed mid-unpack (Ctrl-C) never reached its catch below; its partial dir goes now,
  // while this run holds the install lock, so no other run is unpacking into one.
  await removePartialReleases(path.dirname(release));
  const partial = path.join(path.dirname(release), `.${manifest.version}.partial-${randomBytes(4).toString('hex')}`);
  try {
    await rm(release, { recursive: true, force: true });
    await extractPackage(packageFile, manifest, dataOffset, partial);
    await writeReleaseManifest(partial, manifest);
    await rename(partial, release);
  } catch (err) {
    await rm(partial, { recursive: true, force: true });
    throw err;
  }
}

/** A release being unpacked (unpackRelease: `.<version>.partial-<8 hex>`) when its run was killed; never read or reused. */
export function isPartialReleaseLeftover(entry: string): boolean {
  return /^\.[0-9A-Za-z.+-]+\.partial-[0-9a-f]{8}$/.test(entry);
}

/** Removes the partial leftovers in `releasesDir` (physical path); returns the names removed. Only under the install lock. */
export async function removePartialReleases(releasesDir: string): Promise<string[]> {
  const entries = await readdir(releasesDir).catch(() => [] as string[]);
  const removed: string[] = [];
  for (const entry of entries.filter(isPartialReleaseLeftover)) {
    // Best effort: a leftover that cannot be removed only costs disk, never the install.
    await rm(path.join(releasesDir, entry), { recursive: true, force: true }).then(() => removed.push(entry), () => undefined);
  }
  return removed;
}

/** Whether `physical` is a directory (not a link) holding the manifest of node release `version`. */
export async function isUnpackedRelease(physical: string, version: string): Promise<boolean> {
  try {
    if (!(await lstat(physical)).isDirectory()) return false;
    const file = path.join(physical, RELEASE_MANIFEST_FILE);
    const info = await lstat(file);
    if (!info.isFile() || info.size > MAX_MANIFEST_BYTES) return false;
    const parsed = packageManifestSchema.safeParse(JSON.parse(await readFile(file, 'utf8')));
    return parsed.success && parsed.data.product === PACKAGE_PRODUCT && parsed.data.version === version;
  } catch {
    return false;
  }
}

/**
 * Whether `physical` is a release dir as installers before release manifests left it: a real
 * directory with no manifest and the node's launcher (`bin/zenova-node`) in it. Only trusted
 * beside the installer's own etc/node.env (install-dir-contents.ts).
 */
export async function isManifestlessRelease(physical: string): Promise<boolean> {
  try {
    if (!(await lstat(physical)).isDirectory()) return false;
    if (await lstat(path.join(physical, RELEASE_MANIFEST_FILE)).then(() => true, () => false)) return false;
    return (await lstat(path.join(physical, 'bin', 'zenova-node'))).isFile();
  } catch {
    return false;
  }
}
