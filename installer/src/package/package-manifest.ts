/**
 * The .zpkg manifest: what a node package claims to be and holds. The signature covers the
 * manifest's canonical bytes (canonicalManifestBytes), and every file is checked against its SHA-256,
 * so a verified manifest vouches for every byte of the package.
 */
import { z } from 'zod';

export const PACKAGE_PRODUCT = 'zenova-node';
/** Platforms a package may target (seed 004 §9.2: Linux with systemd on x86_64 or aarch64). */
export const PACKAGE_ARCHES = ['x86_64', 'aarch64'] as const;
export type PackageArch = (typeof PACKAGE_ARCHES)[number];
export const MAX_PACKAGE_FILES = 100_000;
/** The launcher systemd runs (`<release>/bin/zenova-node serve …`); every node package has it. */
export const NODE_ENTRYPOINT = 'bin/zenova-node';
/**
 * The file in which the installer keeps, in each release dir it unpacks, the manifest the release
 * came from (install/release-manifest.ts): the installer's own, so no package may carry that path.
 */
export const RELEASE_MANIFEST_FILE = 'release-manifest.json';

/** A relative POSIX path inside the release: no '..', no absolute, no odd characters. */
const packagePath = z
  .string()
  .min(1)
  .max(1024)
  .regex(/^[A-Za-z0-9._@+-]+(\/[A-Za-z0-9._@+-]+)*$/, 'must be a relative path of letters, digits and . _ @ + -')
  .refine((p) => !p.split('/').some((s) => s === '.' || s === '..'), "must not contain '.' or '..' segments");

export const manifestFileSchema = z.strictObject({
  path: packagePath,
  sha256: z.string().regex(/^[0-9a-f]{64}$/, 'must be 64 lowercase hex digits'),
  /** Permission bits only (no setuid/setgid/sticky): 0644, 0755, … */
  mode: z.number().int().min(0).max(0o777),
  size: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
});
export type ManifestFile = z.infer<typeof manifestFileSchema>;

/** A dotted release number as glibc, libstdc++ and libgcc_s name their symbol versions: 2.34, 3.4.29, 1.3.9. */
const libcVersion = z.string().regex(/^\d{1,4}(\.\d{1,4}){1,3}$/, 'must be a dotted version such as 2.34');

/**
 * The package's glibc floor (installer/src/package/libc-requirements.ts): the highest GLIBC_,
 * GLIBCXX_, CXXABI_ and GCC_ symbol versions its native files need, e.g. { glibc: '2.34',
 * glibcxx: '3.4.29', cxxabi: '1.3.9', gcc: '3.4' }. Packages built before it existed have no
 * `requires`, and those built before CXXABI_/GCC_ were recorded have only glibc/glibcxx; the
 * installer checks only what is there. Strict: an installer that does not know a part refuses the
 * manifest rather than skip a check it cannot make.
 */
export const packageRequiresSchema = z.strictObject({
  glibc: libcVersion.optional(),
  glibcxx: libcVersion.optional(),
  cxxabi: libcVersion.optional(),
  gcc: libcVersion.optional(),
});

export const packageManifestSchema = z
  .strictObject({
    product: z.string().min(1).max(64),
    // It names the release dir (releases/<version>): no `.`/`..`, and no leading dot (partial unpacks).
    version: z.string().regex(/^[0-9A-Za-z][0-9A-Za-z.+-]{0,63}$/, 'must start with a letter or digit and contain only letters, digits, ".", "+" and "-"'),
    platform: z.strictObject({ os: z.literal('linux'), arch: z.enum(PACKAGE_ARCHES) }),
    protocolVersion: z.number().int().positive(),
    files: z.array(manifestFileSchema).min(1).max(MAX_PACKAGE_FILES),
    createdAt: z.iso.datetime(),
    requires: packageRequiresSchema.optional(),
  })
  .refine((m) => new Set(m.files.map((f) => f.path)).size === m.files.length, 'files: every path appears once')
  .refine((m) => !m.files.some((f) => f.path === RELEASE_MANIFEST_FILE), `files: ${RELEASE_MANIFEST_FILE} is the installer's own file in a release`);
export type PackageManifest = z.infer<typeof packageManifestSchema>;

/** JSON with object keys sorted at every level and no spaces: one byte string per manifest. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

export function canonicalManifestBytes(manifest: PackageManifest): Buffer {
  return Buffer.from(canonicalJson(manifest), 'utf8');
}

/** `zenova-node-0.1.0-linux-x86_64.zpkg`, the name `npm run package` gives a package. */
export function packageFileName(manifest: Pick<PackageManifest, 'version' | 'platform'>): string {
  return `${PACKAGE_PRODUCT}-${manifest.version}-${manifest.platform.os}-${manifest.platform.arch}.zpkg`;
}
