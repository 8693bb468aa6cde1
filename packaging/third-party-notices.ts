/**
 * THIRD-PARTY-NOTICES, shipped at the top of the release and of the installer tarball: every npm
 * package whose code is inlined into a bundle (found from esbuild's metafile) or shipped under
 * app/node_modules, with its name, version, package.json license and the full text of its
 * LICENSE / LICENCE / COPYING / NOTICE files. The bundles themselves carry no legal comments.
 * Deterministic: packages sorted by name and version, files by name, line ends normalised, no dates
 * or paths of the build machine, so the same tree always gives the same bytes.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

export const NOTICES_FILE = 'THIRD-PARTY-NOTICES';

/** LICENSE, LICENSE.md, LICENSE-MIT, LICENCE.txt, COPYING, NOTICE … (any case). */
const LICENSE_FILE = /^(licen[cs]e|copying|notice)([.\-_].*)?$/i;

export function isLicenseFile(name: string): boolean {
  return LICENSE_FILE.test(name);
}

export interface NoticePackage {
  name: string;
  version: string;
  /** package.json's license (SPDX expression), `licenses[].type` of older packages, else UNKNOWN. */
  license: string;
  /** File name → text, sorted by name. Empty when the package carries no license file. */
  texts: Array<{ file: string; text: string }>;
}

export interface ThirdPartyNotices {
  text: string;
  packages: NoticePackage[];
  /** name@version of packages listed with their license field only (no license file to quote). */
  withoutLicenseFile: string[];
}

interface PackageJson {
  name?: string;
  version?: string;
  license?: string | { type?: string };
  licenses?: Array<{ type?: string }>;
}

function licenseField(pkg: PackageJson): string {
  if (typeof pkg.license === 'string' && pkg.license !== '') return pkg.license;
  if (typeof pkg.license === 'object' && typeof pkg.license.type === 'string') return pkg.license.type;
  const old = (pkg.licenses ?? []).map((l) => l.type).filter((t): t is string => typeof t === 'string');
  return old.length > 0 ? old.join(' OR ') : 'UNKNOWN';
}

function readPackage(dir: string): NoticePackage {
  const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as PackageJson;
  if (typeof pkg.name !== 'string' || typeof pkg.version !== 'string') throw new Error(`${dir}/package.json has no name or version`);
  const texts = readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isFile() && isLicenseFile(e.name))
    .map((e) => e.name)
    .sort(byCodeUnits)
    .map((file) => ({ file, text: readFileSync(path.join(dir, file), 'utf8').replace(/\r\n?/g, '\n').trimEnd() }));
  return { name: pkg.name, version: pkg.version, license: licenseField(pkg), texts };
}

// Not localeCompare: the order must not depend on the build machine's locale.
function byCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * The package dir of a file inside node_modules (the path up to the package name after the last
 * node_modules/), or undefined for a file outside node_modules.
 */
export function packageDirOf(file: string): string | undefined {
  const m = /^(.*[\\/]node_modules[\\/](?:@[^\\/]+[\\/])?[^\\/]+)[\\/]/.exec(file);
  return m?.[1];
}

const RULE = '='.repeat(80);

/** The notices for the packages in `packageDirs` (absolute dirs; duplicates and repeats are fine). */
export function thirdPartyNotices(packageDirs: Iterable<string>): ThirdPartyNotices {
  const byId = new Map<string, NoticePackage>();
  // Sorted first, so that one name@version found in two places is always read from the same one.
  for (const dir of [...new Set(packageDirs)].sort(byCodeUnits)) {
    const pkg = readPackage(dir);
    const id = `${pkg.name}@${pkg.version}`;
    if (!byId.has(id)) byId.set(id, pkg);
  }
  const packages = [...byId.values()].sort((a, b) => byCodeUnits(a.name, b.name) || byCodeUnits(a.version, b.version));
  const withoutLicenseFile = packages.filter((p) => p.texts.length === 0).map((p) => `${p.name}@${p.version}`);
  const lines: string[] = [
    'THIRD-PARTY SOFTWARE NOTICES',
    '',
    'Zenova Gateway includes the following third-party npm packages, inlined into',
    'app/edge-node/zenova-node.mjs and app/installer/zenova.mjs or shipped under app/node_modules/.',
    'Each is listed with its version, the license its package.json declares and the full text of the',
    'license and notice files it carries. The Node.js runtime under runtime/ has its own: runtime/LICENSE.',
    '',
    ...packages.map((p) => `  ${p.name} ${p.version} (${p.license})${p.texts.length === 0 ? ' [no license file in the package]' : ''}`),
  ];
  for (const p of packages) {
    lines.push('', RULE, `${p.name} ${p.version}`, `License: ${p.license}`);
    if (p.texts.length === 0) lines.push('', 'The package carries no license file; its package.json declares the license above.');
    for (const t of p.texts) lines.push('', `--- ${t.file} ---`, '', t.text);
  }
  return { text: `${lines.join('\n')}\n`, packages, withoutLicenseFile };
}
