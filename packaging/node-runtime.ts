/**
 * The Node runtime a package carries: npm's `node-linux-<cpu>@22` tarball (bin/node plus Node's
 * headers in include/node, which the native-module rebuild uses with `node-gyp --nodedir`).
 * Fetched once with `npm pack` into .zenova/cache/ and unpacked beside it; later builds are offline.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import type { PackageArch } from '../installer/src/package/package-manifest.js';

const run = promisify(execFile);

/** The Node major the packages carry (the product runs on Node ≥ 20; 22 is the current LTS). */
export const RUNTIME_NODE_MAJOR = 22;

const NPM_CPU: Record<PackageArch, string> = { x86_64: 'x64', aarch64: 'arm64' };

export interface NodeRuntime {
  arch: PackageArch;
  version: string;
  /** The unpacked tarball: bin/node, include/node, LICENSE. */
  dir: string;
  binary: string;
}

function npmName(arch: PackageArch): string {
  return `node-linux-${NPM_CPU[arch]}`;
}

function cachedTarball(cacheDir: string, arch: PackageArch): string | undefined {
  const pattern = new RegExp(`^${npmName(arch)}-(${RUNTIME_NODE_MAJOR}\\.\\d+\\.\\d+)\\.tgz$`);
  const found = readdirSync(cacheDir)
    .map((name) => ({ name, m: pattern.exec(name) }))
    .filter((x) => x.m !== null)
    .sort((a, b) => compareVersions(b.m![1]!, a.m![1]!));
  return found[0]?.name;
}

function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) if ((pa[i] ?? 0) !== (pb[i] ?? 0)) return (pa[i] ?? 0) - (pb[i] ?? 0);
  return 0;
}

/** The newest cached runtime for `arch`, fetched from the npm registry when none is cached. */
export async function nodeRuntime(cacheDir: string, arch: PackageArch, log: (line: string) => void): Promise<NodeRuntime> {
  mkdirSync(cacheDir, { recursive: true });
  let tarball = cachedTarball(cacheDir, arch);
  if (tarball === undefined) {
    log(`fetching ${npmName(arch)}@${RUNTIME_NODE_MAJOR} from the npm registry (npm pack) into ${cacheDir}`);
    // Packed into a private dir and renamed in, so a parallel build never reads half a tarball.
    const tmp = mkdtempSync(path.join(cacheDir, '.pack-'));
    try {
      const { stdout } = await run('npm', ['pack', '--silent', '--pack-destination', tmp, `${npmName(arch)}@${RUNTIME_NODE_MAJOR}`], { maxBuffer: 64 * 1024 * 1024 });
      const name = stdout.trim().split('\n').pop() ?? '';
      renameSync(path.join(tmp, name), path.join(cacheDir, name));
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
    tarball = cachedTarball(cacheDir, arch);
    if (tarball === undefined) throw new Error(`npm pack did not leave a ${npmName(arch)}-${RUNTIME_NODE_MAJOR}.x.y.tgz in ${cacheDir}`);
  }
  const version = tarball.slice(npmName(arch).length + 1, -'.tgz'.length);
  const dir = path.join(cacheDir, `${npmName(arch)}-${version}`);
  if (!existsSync(path.join(dir, 'bin', 'node'))) {
    // Unpack into a temp dir renamed into place, so an interrupted build never leaves half a runtime.
    const tmp = mkdtempSync(`${dir}.tmp-`);
    await run('tar', ['-xzf', path.join(cacheDir, tarball), '-C', tmp, '--strip-components=1']);
    try {
      renameSync(tmp, dir);
    } catch (err) {
      // A parallel build unpacked it first: keep theirs (it may be in use), drop ours.
      rmSync(tmp, { recursive: true, force: true });
      if (!existsSync(path.join(dir, 'bin', 'node'))) throw err;
    }
  }
  return { arch, version, dir, binary: path.join(dir, 'bin', 'node') };
}

/** The package's name for the CPU this build machine has, when it is one packages target. */
export function hostArch(): PackageArch | undefined {
  if (process.arch === 'x64') return 'x86_64';
  if (process.arch === 'arm64') return 'aarch64';
  return undefined;
}
