/**
 * Verifies a .zpkg without writing anything: container shape, Ed25519 signature over the manifest
 * bytes (before the manifest is even parsed), the manifest schema, and the SHA-256 of every file.
 * Returns the manifest or one NODE-PKG-… finding. Product, version and platform are the host
 * checks' business (they need the host's and the control plane's facts).
 */
import { createHash, createPublicKey, verify } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import type { z } from 'zod';
import { formatIssuePath } from '../../../edge-node/src/zod-issues.js';
import { productVersion } from '../../../proto/src/product-version.js';
import { ED25519_SIGNATURE_BYTES, MAX_MANIFEST_BYTES, ZPKG_MAGIC } from './package-format.js';
import { RELEASE_KEY_NAME } from './release-key.js';
import { canonicalManifestBytes, packageManifestSchema } from './package-manifest.js';
import type { PackageManifest } from './package-manifest.js';

const READ_CHUNK_BYTES = 1024 * 1024;

export type PackageProblemCode = 'NODE-PKG-UNREADABLE' | 'NODE-PKG-FORMAT' | 'NODE-PKG-SIGNATURE' | 'NODE-PKG-NEWER' | 'NODE-PKG-CHECKSUM';

export type PackageVerdict =
  | { ok: true; manifest: PackageManifest; /** Where the first file's bytes start. */ dataOffset: number }
  | { ok: false; code: PackageProblemCode; cause: string; advice: string };

const ADVICE: Record<PackageProblemCode, string> = {
  'NODE-PKG-UNREADABLE': 'check the --package path and that the file was copied completely',
  'NODE-PKG-FORMAT': "download the package again from the release site and check its SHA-256 against the release's SHA256SUMS",
  'NODE-PKG-SIGNATURE': 'download the package again from the release site; never install a package whose signature fails',
  'NODE-PKG-NEWER': "the package is genuine but made for a newer installer: run the command with ./zenova from the installer tarball of the package's release (zenova-installer-<version>-linux-<arch>.tar.gz); downloading the package again does not help",
  'NODE-PKG-CHECKSUM': "the package is damaged or tampered with: download it again and check its SHA-256 against the release's SHA256SUMS",
};

/** The cause when the installer's own release key is damaged (`problem` says how). */
export function releaseKeyDamaged(problem: string): string {
  return `the installer's release key (${RELEASE_KEY_NAME}) is unreadable or damaged (${problem}): unpack the installer again`;
}

/** The advice when the installer's release key is missing or damaged: the package is not at fault. */
export const RELEASE_KEY_ADVICE = 'Unpack the installer tarball again (it carries the release key beside the CLI) and run the command from there; never replace the key by hand.';

class PackageProblem extends Error {
  constructor(readonly code: PackageProblemCode, message: string) {
    super(message);
  }
}

async function readExactly(handle: FileHandle, position: number, length: number, what: string): Promise<Buffer> {
  const buffer = Buffer.alloc(length);
  let done = 0;
  while (done < length) {
    const { bytesRead } = await handle.read(buffer, done, length - done, position + done);
    if (bytesRead === 0) throw new PackageProblem('NODE-PKG-FORMAT', `the file ends inside the ${what} (truncated download?)`);
    done += bytesRead;
  }
  return buffer;
}

/**
 * The trusted release key as a KeyObject. A damaged key file (empty, cut, not PEM, another key
 * type) refuses every package with NODE-PKG-SIGNATURE, as a missing one does: it is the installer's
 * own file that is broken, never a reason to skip the signature.
 */
function trustedKey(pem: string): KeyObject {
  const problem = releaseKeyProblem(pem);
  if (problem !== undefined) throw new PackageProblem('NODE-PKG-SIGNATURE', releaseKeyDamaged(problem));
  return createPublicKey(pem);
}

/** Why `pem` is not a usable Ed25519 public key, or undefined when it is one. */
export function releaseKeyProblem(pem: string): string | undefined {
  let key: KeyObject;
  try {
    key = createPublicKey(pem);
  } catch (err) {
    return pem.trim() === '' ? 'the key file is empty' : `it is not a readable public key (${(err as NodeJS.ErrnoException).code ?? 'unreadable'})`;
  }
  return key.asymmetricKeyType === 'ed25519' ? undefined : `it is a ${key.asymmetricKeyType ?? 'unknown'} key, not an Ed25519 public key`;
}

interface Header {
  manifestBytes: Buffer;
  signature: Buffer;
  dataOffset: number;
}

async function readHeader(handle: FileHandle): Promise<Header> {
  const magic = await readExactly(handle, 0, ZPKG_MAGIC.length, 'header');
  if (!magic.equals(ZPKG_MAGIC)) throw new PackageProblem('NODE-PKG-FORMAT', 'the file is not a .zpkg (wrong magic bytes)');
  let offset = ZPKG_MAGIC.length;
  const manifestLength = (await readExactly(handle, offset, 4, 'header')).readUInt32BE(0);
  offset += 4;
  if (manifestLength === 0 || manifestLength > MAX_MANIFEST_BYTES) throw new PackageProblem('NODE-PKG-FORMAT', `the manifest length ${manifestLength} is out of range`);
  const manifestBytes = await readExactly(handle, offset, manifestLength, 'manifest');
  offset += manifestLength;
  const signatureLength = (await readExactly(handle, offset, 4, 'header')).readUInt32BE(0);
  offset += 4;
  if (signatureLength !== ED25519_SIGNATURE_BYTES) throw new PackageProblem('NODE-PKG-FORMAT', `the signature is ${signatureLength} bytes, an Ed25519 signature has ${ED25519_SIGNATURE_BYTES}`);
  const signature = await readExactly(handle, offset, signatureLength, 'signature');
  offset += signatureLength;
  return { manifestBytes, signature, dataOffset: offset };
}

/**
 * The manifest fields the schema refused, by path only (`requires.libatomic`, `platform.arch`): a
 * value is not echoed, the path is what tells which release part this installer lacks.
 */
function refusedFields(error: z.ZodError, max = 3): string {
  const paths = error.issues.flatMap((issue) => (issue.code === 'unrecognized_keys' ? issue.keys.map((k) => formatIssuePath([...issue.path, k])) : [formatIssuePath(issue.path)]));
  const unique = [...new Set(paths)];
  const named = unique.length > max ? `${unique.slice(0, max).join(', ')} (${unique.length - max} more)` : unique.join(', ');
  return `${unique.length === 1 ? 'field' : 'fields'} ${named}`;
}

/** The signed manifest's version as written, when it looks like one (for the cause only). */
function manifestVersion(json: unknown): string | undefined {
  const version = (json as { version?: unknown } | null)?.version;
  return packageManifestSchema.shape.version.safeParse(version).success ? (version as string) : undefined;
}

/**
 * Runs after the signature verified: the manifest bytes are the release owner's, whole, so a
 * manifest this installer cannot read comes from a newer release (NODE-PKG-NEWER), never from a
 * damaged download; downloading it again would repeat the refusal.
 */
function parseManifest(bytes: Buffer): PackageManifest {
  const newer = (what: string, version?: string): PackageProblem =>
    new PackageProblem('NODE-PKG-NEWER', `the package is signed by the release key, but this installer (${productVersion()}) does not understand its manifest${version === undefined ? '' : ` (release ${version})`}: ${what}`);
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw newer('not JSON');
  }
  const parsed = packageManifestSchema.safeParse(json);
  if (!parsed.success) throw newer(refusedFields(parsed.error), manifestVersion(json));
  // Only the canonical form is accepted: one manifest, one byte string, one signature.
  if (!canonicalManifestBytes(parsed.data).equals(bytes)) throw newer('not in canonical form', parsed.data.version);
  return parsed.data;
}

/** Hashes every file's bytes in order and checks the file ends exactly after the last one. */
async function checkFiles(handle: FileHandle, manifest: PackageManifest, dataOffset: number): Promise<void> {
  const size = (await handle.stat()).size;
  const expectedEnd = manifest.files.reduce((end, f) => end + f.size, dataOffset);
  if (size < expectedEnd) throw new PackageProblem('NODE-PKG-FORMAT', `the file is ${size} bytes, the manifest needs ${expectedEnd} (truncated download?)`);
  if (size > expectedEnd) throw new PackageProblem('NODE-PKG-FORMAT', `the file has ${size - expectedEnd} bytes after the last packaged file`);
  const buffer = Buffer.alloc(READ_CHUNK_BYTES);
  let position = dataOffset;
  for (const file of manifest.files) {
    const hash = createHash('sha256');
    let left = file.size;
    while (left > 0) {
      const { bytesRead } = await handle.read(buffer, 0, Math.min(left, buffer.length), position);
      if (bytesRead === 0) throw new PackageProblem('NODE-PKG-FORMAT', 'the file ended early');
      hash.update(buffer.subarray(0, bytesRead));
      left -= bytesRead;
      position += bytesRead;
    }
    if (hash.digest('hex') !== file.sha256) throw new PackageProblem('NODE-PKG-CHECKSUM', `${file.path} does not match its SHA-256 in the signed manifest`);
  }
}

export async function verifyPackage(file: string, trustedPublicKeyPem: string): Promise<PackageVerdict> {
  let key: KeyObject;
  try {
    key = trustedKey(trustedPublicKeyPem);
  } catch (err) {
    if (err instanceof PackageProblem) return { ok: false, code: err.code, cause: err.message, advice: RELEASE_KEY_ADVICE };
    throw err;
  }
  return readPackage(file, key);
}

/**
 * What can be told of a package without a usable release key: whether it opens as a regular file
 * and its header has the package's shape (NODE-PKG-UNREADABLE, NODE-PKG-FORMAT), so a missing or
 * malformed file is reported beside the key's own finding, never hidden by it. undefined: nothing
 * wrong so far; the manifest and checksums are never read without the signature checked.
 */
export async function packageShapeProblem(file: string): Promise<Extract<PackageVerdict, { ok: false }> | undefined> {
  const verdict = await readPackage(file, undefined);
  return verdict === undefined || verdict.ok ? undefined : verdict;
}

/** Opens and reads the package; without a key (packageShapeProblem) it stops after the header: undefined. */
async function readPackage(file: string, key: KeyObject): Promise<PackageVerdict>;
async function readPackage(file: string, key: undefined): Promise<PackageVerdict | undefined>;
async function readPackage(file: string, key: KeyObject | undefined): Promise<PackageVerdict | undefined> {
  let handle: FileHandle;
  try {
    // O_NONBLOCK: a FIFO with no writer would hold the open for ever; opened at once, the stat below refuses it.
    handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    return { ok: false, code: 'NODE-PKG-UNREADABLE', cause: `cannot read the package ${file} (${code})`, advice: ADVICE['NODE-PKG-UNREADABLE'] };
  }
  try {
    const info = await handle.stat();
    if (!info.isFile()) {
      const what = info.isDirectory() ? 'a directory' : info.isFIFO() ? 'a FIFO, a named pipe' : info.isCharacterDevice() || info.isBlockDevice() ? 'a device' : 'not a file';
      throw new PackageProblem('NODE-PKG-UNREADABLE', `--package ${file} is not a regular file (it is ${what})`);
    }
    const header = await readHeader(handle);
    if (key === undefined) return undefined;
    if (!verify(null, header.manifestBytes, key, header.signature)) {
      throw new PackageProblem('NODE-PKG-SIGNATURE', `the package signature does not verify with the trusted release key (${file})`);
    }
    const manifest = parseManifest(header.manifestBytes);
    await checkFiles(handle, manifest, header.dataOffset);
    return { ok: true, manifest, dataOffset: header.dataOffset };
  } catch (err) {
    if (err instanceof PackageProblem) return { ok: false, code: err.code, cause: err.message, advice: ADVICE[err.code] };
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    return { ok: false, code: 'NODE-PKG-UNREADABLE', cause: `cannot read the package ${file} (${code})`, advice: ADVICE['NODE-PKG-UNREADABLE'] };
  } finally {
    await handle.close();
  }
}
