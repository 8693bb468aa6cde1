/**
 * better-sqlite3, the node's one native module, rebuilt against the Node runtime the package
 * carries (its ABI differs from the build machine's Node). node-gyp builds from the module's own
 * sources with `--nodedir` pointing at the runtime's headers, so no download happens. The result is
 * cached per (module version, runtime version, arch, build host's libc): the SQLite amalgamation takes
 * minutes to compile, and the .node needs the glibc/libstdc++ symbol versions of the host that
 * compiled it (the package's glibc floor), so a cache made on another host is never reused silently.
 * Cross builds (aarch64 on x86_64) need a cross compiler; without one they fail with a clear reason.
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import type { NodeRuntime } from './node-runtime.js';
import { hostArch } from './node-runtime.js';
import { isLicenseFile } from './third-party-notices.js';

const run = promisify(execFile);

/** The runtime files of better-sqlite3 and its JS dependencies, as shipped under app/node_modules. */
export interface NativeModuleFiles {
  /** Package-relative path under app/node_modules → absolute source file. */
  files: Array<{ path: string; source: string }>;
  /** The absolute source dirs of the shipped packages (for THIRD-PARTY-NOTICES). */
  packageDirs: string[];
}

const SHIPPED_MODULES = ['better-sqlite3', 'bindings', 'file-uri-to-path'];

/**
 * Whether a file of bindings / file-uri-to-path ships: code and package.json and every license file
 * (bindings' is LICENSE.md), not tests, typings, other docs or dotfiles (.npmignore, .travis.yml).
 */
function shipsFromJsDependency(rel: string): boolean {
  const name = path.posix.basename(rel);
  if (rel.startsWith('test/') || rel.split('/').some((part) => part.startsWith('.'))) return false;
  if (isLicenseFile(name)) return true;
  return !name.endsWith('.md') && !name.endsWith('.d.ts');
}

function moduleVersion(repoRoot: string, name: string): string {
  return (JSON.parse(readFileSync(path.join(repoRoot, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
}

/**
 * The build host's C library as it goes into the cache key: `glibc-2.36`, or `libc-unknown`
 * (musl and others, which report no glibc version).
 */
export function buildHostLibc(): string {
  const header = (process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header;
  const glibc = header?.glibcVersionRuntime;
  return glibc !== undefined && /^\d+\.\d+$/.test(glibc) ? `glibc-${glibc}` : 'libc-unknown';
}

async function rebuild(repoRoot: string, runtime: NodeRuntime, outFile: string, log: (line: string) => void): Promise<void> {
  if (runtime.arch !== hostArch()) {
    throw new Error(`cannot compile better-sqlite3 for ${runtime.arch} on this ${process.arch} machine (no cross toolchain is set up): build the ${runtime.arch} package on a ${runtime.arch} machine`);
  }
  mkdirSync(path.dirname(outFile), { recursive: true });
  const work = mkdtempSync(`${outFile}.build-`);
  cpSync(path.join(repoRoot, 'node_modules', 'better-sqlite3'), work, { recursive: true, filter: (src) => !src.includes(`${path.sep}build${path.sep}`) && !src.endsWith(`${path.sep}build`) });
  const nodeGyp = path.join(repoRoot, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
  log(`compiling better-sqlite3 against Node ${runtime.version} (${runtime.arch}); takes a few minutes the first time`);
  try {
    await run(process.execPath, [nodeGyp, 'rebuild', '--release', `--nodedir=${runtime.dir}`, `--jobs=max`], { cwd: work, maxBuffer: 256 * 1024 * 1024, env: { ...process.env, npm_config_nodedir: runtime.dir } });
    // rename is atomic: a parallel build of the same module just replaces it with equal bytes.
    renameSync(path.join(work, 'build', 'Release', 'better_sqlite3.node'), outFile);
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`node-gyp failed to build better-sqlite3:\n${(e.stderr ?? e.message).split('\n').slice(-30).join('\n')}`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** better-sqlite3 (rebuilt for `runtime`), bindings and file-uri-to-path, ready to ship. */
export async function nativeModuleFiles(repoRoot: string, cacheDir: string, runtime: NodeRuntime, log: (line: string) => void): Promise<NativeModuleFiles> {
  const modules = path.join(repoRoot, 'node_modules');
  const version = moduleVersion(repoRoot, 'better-sqlite3');
  const built = path.join(cacheDir, 'native', `better-sqlite3-${version}-node-${runtime.version}-linux-${runtime.arch}-${buildHostLibc()}`, 'better_sqlite3.node');
  if (!existsSync(built)) await rebuild(repoRoot, runtime, built, log);
  else log(`better-sqlite3 ${version} for Node ${runtime.version} (${runtime.arch}, built on ${buildHostLibc()}): cached build`);
  const files: NativeModuleFiles['files'] = [
    { path: 'better-sqlite3/package.json', source: path.join(modules, 'better-sqlite3', 'package.json') },
    { path: 'better-sqlite3/LICENSE', source: path.join(modules, 'better-sqlite3', 'LICENSE') },
    { path: 'better-sqlite3/build/Release/better_sqlite3.node', source: built },
  ];
  const lib = path.join(modules, 'better-sqlite3', 'lib');
  for (const rel of listFiles(lib)) files.push({ path: `better-sqlite3/lib/${rel}`, source: path.join(lib, rel) });
  // better-sqlite3 finds its .node through `bindings`, which needs file-uri-to-path.
  for (const dep of ['bindings', 'file-uri-to-path']) {
    for (const rel of listFiles(path.join(modules, dep))) {
      if (shipsFromJsDependency(rel)) files.push({ path: `${dep}/${rel}`, source: path.join(modules, dep, rel) });
    }
  }
  return { files, packageDirs: SHIPPED_MODULES.map((name) => path.join(modules, name)) };
}

export function listFiles(dir: string, prefix = ''): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const rel = prefix === '' ? entry.name : `${prefix}/${entry.name}`;
    if (entry.isDirectory()) out.push(...listFiles(path.join(dir, entry.name), rel));
    else if (entry.isFile()) out.push(rel);
  }
  return out.sort();
}

