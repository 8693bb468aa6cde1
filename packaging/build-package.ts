/**
 * `npm run package`: builds the offline node package and the installer tarball per architecture.
 *
 *   npm run package -- [--arch x86_64|aarch64 …] [--signing-key FILE] [--out-dir DIR] [--cache-dir DIR]
 *
 * Output (dist/ by default): zenova-node-<version>-linux-<arch>.zpkg (signed, see
 * installer/src/package/package-format.ts), zenova-installer-<version>-linux-<arch>.tar.gz, and
 * SHA256SUMS over the files the run wrote (what the installer's advice for a damaged download checks).
 * Without --arch both architectures are attempted; one whose parts cannot be made on this machine
 * (aarch64's native module needs an aarch64 build host) is reported as skipped, never faked.
 * The signing key: --signing-key, else $ZENOVA_RELEASE_SIGNING_KEY, else
 * .zenova/release-key/zenova-release-signing.key; create one with `npx tsx packaging/release-key.ts --out DIR`.
 */
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { PROTOCOL_VERSION } from '../proto/src/index.js';
import { productVersion } from '../proto/src/product-version.js';
import { PACKAGE_ARCHES, PACKAGE_PRODUCT, packageFileName } from '../installer/src/package/package-manifest.js';
import type { PackageArch, PackageManifest } from '../installer/src/package/package-manifest.js';
import { bundleApps } from './bundle-apps.js';
import { writeInstallerTarball } from './installer-tarball.js';
import { nativeModuleFiles } from './native-modules.js';
import { nodeRuntime } from './node-runtime.js';
import { describeLibcFloor, libcFloor } from './libc-floor.js';
import { installerEntries, releaseEntries } from './release-contents.js';
import { PRIVATE_KEY_FILE, loadReleaseKey } from './release-key.js';
import { NOTICES_FILE, thirdPartyNotices } from './third-party-notices.js';
import { writePackage } from './zpkg/write-package.js';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export interface BuildOptions {
  arches: PackageArch[];
  signingKeyFile: string;
  outDir: string;
  cacheDir: string;
  log?: (line: string) => void;
}

export interface BuiltArch {
  arch: PackageArch;
  packageFile: string;
  installerFile: string;
  manifest: PackageManifest;
}

export interface BuildResult {
  built: BuiltArch[];
  skipped: Array<{ arch: PackageArch; reason: string }>;
  /** SHA256SUMS over every built file; absent when nothing was built. */
  checksumsFile?: string;
}

export function installerTarballName(version: string, arch: PackageArch): string {
  return `zenova-installer-${version}-linux-${arch}`;
}

/** The checksum file `npm run package` writes beside the packages and tarballs. */
export const CHECKSUMS_FILE = 'SHA256SUMS';

async function sha256OfFile(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/**
 * Writes `dir/SHA256SUMS` in sha256sum's format (`<hex>  <name>`, so `sha256sum -c` reads it) for
 * `files`, all in `dir`; returns its path. Operators check a download against it.
 */
export async function writeChecksums(dir: string, files: string[]): Promise<string> {
  const out = path.join(dir, CHECKSUMS_FILE);
  // A release is built in more than one run (each architecture on its own machine) into one dir:
  // the lines of files this run did not write are kept while those files are still there, those
  // it wrote replaced.
  const written = new Set(files.map((file) => path.basename(file)));
  const kept = existsSync(out)
    ? readFileSync(out, 'utf8').split(/\r?\n/).flatMap((line) => {
      // CRLF (a copy through Windows) and sha256sum's binary-mode `*` still name the same file.
      const m = /^([0-9a-f]{64}) [ *]([^/\\]+)$/.exec(line);
      return m && !written.has(m[2]!) && existsSync(path.join(dir, m[2]!)) ? [`${m[1]}  ${m[2]}`] : [];
    })
    : [];
  const lines = kept.map((line) => `${line}\n`);
  for (const file of files) lines.push(`${await sha256OfFile(file)}  ${path.basename(file)}\n`);
  // Written whole then renamed: a reader never sees half a list.
  await writeFile(`${out}.tmp`, lines.join(''), { mode: 0o644 });
  await rename(`${out}.tmp`, out);
  return out;
}

export async function buildPackages(opts: BuildOptions): Promise<BuildResult> {
  const log = opts.log ?? ((line: string) => process.stdout.write(`${line}\n`));
  const key = loadReleaseKey(opts.signingKeyFile);
  // The repository's installer trusts exactly installer/release-signing-key.pub.pem when present:
  // a package signed with another key would be refused by every installer built from this tree.
  const shipped = path.join(REPO_ROOT, 'installer', 'release-signing-key.pub.pem');
  if (existsSync(shipped) && readFileSync(shipped, 'utf8').trim() !== key.publicKeyPem.trim()) {
    throw new Error(`${opts.signingKeyFile} does not match installer/release-signing-key.pub.pem: sign with the release key that file names`);
  }
  const version = productVersion();
  mkdirSync(opts.outDir, { recursive: true });
  log(`bundling the node daemon and the zenova CLI (esbuild)`);
  const apps = await bundleApps(REPO_ROOT);
  const result: BuildResult = { built: [], skipped: [] };
  for (const arch of opts.arches) {
    let parts;
    try {
      const runtime = await nodeRuntime(opts.cacheDir, arch, log);
      const native = await nativeModuleFiles(REPO_ROOT, opts.cacheDir, runtime, log);
      const notices = thirdPartyNotices([...apps.node.packageDirs, ...apps.cli.packageDirs, ...native.packageDirs]);
      log(`${NOTICES_FILE}: ${notices.packages.length} npm packages`);
      // Listed with their package.json license only: someone has to check what that license asks for.
      for (const id of notices.withoutLicenseFile) log(`WARNING ${NOTICES_FILE}: ${id} carries no LICENSE/COPYING/NOTICE file; listed with its package.json license field only`);
      parts = { version, runtime, apps, native, publicKeyPem: key.publicKeyPem, notices: notices.text };
    } catch (err) {
      result.skipped.push({ arch, reason: (err as Error).message });
      log(`SKIPPED ${arch}: ${(err as Error).message}`);
      continue;
    }
    const platform = { os: 'linux' as const, arch };
    const packageFile = path.join(opts.outDir, packageFileName({ version, platform }));
    const entries = releaseEntries(parts);
    // The oldest glibc/libstdc++/libgcc_s this arch's native files load with, signed into the manifest.
    const floor = await libcFloor(entries);
    const requires = Object.keys(floor.requires).length === 0 ? undefined : floor.requires;
    log(`${arch} needs ${describeLibcFloor(floor)}`);
    const manifest = await writePackage({ out: packageFile, product: PACKAGE_PRODUCT, version, platform, protocolVersion: PROTOCOL_VERSION, entries, privateKey: key.privateKey, requires });
    log(`wrote ${packageFile} (${manifest.files.length} files, Node ${parts.runtime.version})`);
    const installerFile = path.join(opts.outDir, `${installerTarballName(version, arch)}.tar.gz`);
    await writeInstallerTarball(installerFile, installerEntries(parts));
    log(`wrote ${installerFile}`);
    result.built.push({ arch, packageFile, installerFile, manifest });
  }
  if (result.built.length > 0) {
    result.checksumsFile = await writeChecksums(opts.outDir, result.built.flatMap((b) => [b.packageFile, b.installerFile]));
    log(`wrote ${result.checksumsFile}`);
  }
  return result;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      arch: { type: 'string', multiple: true },
      'signing-key': { type: 'string' },
      'out-dir': { type: 'string' },
      'cache-dir': { type: 'string' },
    },
  });
  const arches = values.arch ?? [...PACKAGE_ARCHES];
  for (const a of arches) if (!(PACKAGE_ARCHES as readonly string[]).includes(a)) throw new Error(`--arch ${a}: expected one of ${PACKAGE_ARCHES.join(', ')}`);
  const signingKeyFile = values['signing-key'] ?? process.env.ZENOVA_RELEASE_SIGNING_KEY ?? path.join(REPO_ROOT, '.zenova', 'release-key', PRIVATE_KEY_FILE);
  if (!existsSync(signingKeyFile)) {
    throw new Error(`no release signing key at ${signingKeyFile}: create one with \`npx tsx packaging/release-key.ts --out .zenova/release-key\` or pass --signing-key FILE`);
  }
  const result = await buildPackages({
    arches: arches as PackageArch[],
    signingKeyFile,
    outDir: path.resolve(values['out-dir'] ?? path.join(REPO_ROOT, 'dist')),
    cacheDir: path.resolve(values['cache-dir'] ?? path.join(REPO_ROOT, '.zenova', 'cache')),
  });
  for (const s of result.skipped) process.stderr.write(`package: ${s.arch} NOT BUILT: ${s.reason}\n`);
  if (result.built.length === 0) process.exitCode = 1;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`package: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  });
}
