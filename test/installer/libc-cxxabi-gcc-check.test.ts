/**
 * The CXXABI (libstdc++.so.6) and GCC (libgcc_s.so.1) parts of the glibc floor, checked by
 * `zenova install node` against real ELF libraries: each built here with the C compiler and a
 * version script that defines exactly the symbol versions a test wants (a libstdc++ with every
 * GLIBCXX version but CXXABI only up to 1.3.8, a libgcc_s without GCC_3.4), found through the
 * installer's own library lookup and read by its own ELF reader.
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { runInstall } from '../../installer/src/commands/install.js';
import type { HostLibrary } from '../../installer/src/host/host-probe.js';
import { hostLibgccS, hostLibstdcxx } from '../../installer/src/host/libstdcxx-lookup.js';
import type { PackageManifest } from '../../installer/src/package/package-manifest.js';
import { GCC_12_LIBGCC_S_VERSIONS, captureCli, cxxabiVersions, fakeProbe, glibcxxVersions, hostEnv, listTree } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const run = promisify(execFile);
const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-cxxabi-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

/**
 * A real shared library `soname` in a dir of its own that defines `versions` (one symbol each),
 * for this machine's CPU; the dir is what the installer's lookup is pointed at.
 */
async function versionedLibrary(name: string, soname: string, versions: string[]): Promise<string> {
  const dir = join(work, name);
  mkdirSync(dir);
  const symbol = (v: string): string => `zn_${v.replace(/[^A-Za-z0-9]/g, '_')}`;
  writeFileSync(join(dir, 'versions.map'), versions.map((v, i) => `${v} { global: ${symbol(v)};${i === 0 ? ' local: *;' : ''} };\n`).join(''));
  writeFileSync(join(dir, 'symbols.c'), versions.map((v) => `int ${symbol(v)} = 1;\n`).join(''));
  try {
    await run('cc', ['-shared', '-nostdlib', '-fPIC', `-Wl,-soname,${soname}`, `-Wl,--version-script=${join(dir, 'versions.map')}`, '-o', join(dir, soname), join(dir, 'symbols.c')]);
  } catch (err) {
    throw new Error(`these tests build their libraries with the C compiler (cc), as the package build does better-sqlite3: ${(err as Error).message}`);
  }
  return dir;
}

/** The installer's own lookup, pointed at `dir` only (an empty ldconfig cache). */
function lookupIn(dir: string): { cacheFile: string; dirs: string[] } {
  const cacheFile = join(work, 'empty-ld.so.cache');
  writeFileSync(cacheFile, '');
  return { cacheFile, dirs: [dir] };
}

async function mustFind(found: Promise<HostLibrary | undefined>, what: string): Promise<HostLibrary> {
  const lib = await found;
  if (lib === undefined) throw new Error(`the lookup did not find the ${what} built for this test`);
  return lib;
}

/** What the carried Node 22 and a better-sqlite3 built on Debian 12 need. */
const FLOOR: NonNullable<PackageManifest['requires']> = { glibc: '2.34', glibcxx: '3.4.29', cxxabi: '1.3.9', gcc: '3.4' };

// GCC 12's GLIBCXX versions, but CXXABI only up to 1.3.8: the loader refuses what needs CXXABI_1.3.9.
const oldCxxabiDir = await versionedLibrary('old-cxxabi', 'libstdc++.so.6', [...glibcxxVersions(30), ...cxxabiVersions(8)]);
const gcc12LibstdcxxDir = await versionedLibrary('gcc12-libstdcxx', 'libstdc++.so.6', [...glibcxxVersions(30), ...cxxabiVersions(13)]);
const oldLibgccDir = await versionedLibrary('old-libgcc', 'libgcc_s.so.1', ['GCC_3.0', 'GCC_3.3', 'GCC_3.3.1']);
const gcc12LibgccDir = await versionedLibrary('gcc12-libgcc', 'libgcc_s.so.1', GCC_12_LIBGCC_S_VERSIONS);

const libs = {
  oldCxxabi: () => mustFind(hostLibstdcxx(lookupIn(oldCxxabiDir)), 'libstdc++.so.6 without CXXABI_1.3.9'),
  gcc12Libstdcxx: () => mustFind(hostLibstdcxx(lookupIn(gcc12LibstdcxxDir)), "GCC 12's libstdc++.so.6"),
  oldLibgcc: () => mustFind(hostLibgccS(lookupIn(oldLibgccDir)), 'libgcc_s.so.1 without GCC_3.4'),
  gcc12Libgcc: () => mustFind(hostLibgccS(lookupIn(gcc12LibgccDir)), "GCC 12's libgcc_s.so.1"),
};

async function attempt(pkg: string, probe: ReturnType<typeof fakeProbe>, withToken: boolean): Promise<{ exit: number; out: string; changed: boolean; enrolled: boolean }> {
  const root = mkdtempSync(join(tmpdir(), 'zn-cxxabi-root-'));
  try {
    mkdirSync(join(root, 'etc/systemd/system'), { recursive: true });
    let enrolled = false;
    const host = hostEnv(root, {
      keyPem: keys.publicKeyPem,
      probe,
      enroll: async () => {
        enrolled = true;
        throw new Error('the token must not be used');
      },
    });
    const before = listTree(root);
    const cli = captureCli(work);
    const exit = await runInstall(['node', '--package', pkg, '--control-plane', 'https://cp.example.test', ...(withToken ? ['--token', 'tok_never_used'] : ['--check-only'])], cli.ctx, host);
    return { exit, out: cli.out(), changed: JSON.stringify(listTree(root)) !== JSON.stringify(before), enrolled };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

const needsCxxabi = (await buildNodePackage(work, keys, { name: 'needs-cxxabi-1.3.9.zpkg', requires: FLOOR })).file;

t.test('a host whose libstdc++.so.6 has every GLIBCXX version the package needs but not its CXXABI_1.3.9 is refused as NODE-HOST-LIBC naming that version and the library, before anything is written or the token used', async (t) => {
  const probe = fakeProbe({ libstdcxx: libs.oldCxxabi, libgccS: libs.gcc12Libgcc });
  for (const withToken of [false, true]) {
    const label = withToken ? 'with a token' : '--check-only';
    const r = await attempt(needsCxxabi, probe, withToken);
    t.equal(r.exit, 1, `${label}: exit 1: ${r.out}`);
    t.match(
      r.out,
      `✗ NODE-HOST-LIBC: the package's native files (its Node runtime, better-sqlite3) need glibc ≥ 2.34, libstdc++ with GLIBCXX_3.4.29 and CXXABI_1.3.9, and libgcc_s with GCC_3.4; this host's ${oldCxxabiDir}/libstdc++.so.6 lacks CXXABI_1.3.9 (it provides up to CXXABI_1.3.8)`,
      `${label}: the cause names the missing version and the library`,
    );
    t.match(r.out, /1 blocking finding; nothing was written/, `${label}: the only blocking finding`);
    t.equal(r.changed, false, `${label}: nothing written`);
    t.equal(r.enrolled, false, `${label}: the token was not used`);
  }
});

t.test('a host whose libgcc_s.so.1 lacks the GCC_3.4 the package needs is refused as NODE-HOST-LIBC naming that version and the library', async (t) => {
  const r = await attempt(needsCxxabi, fakeProbe({ libstdcxx: libs.gcc12Libstdcxx, libgccS: libs.oldLibgcc }), false);
  t.equal(r.exit, 1, `exit 1: ${r.out}`);
  t.match(r.out, `✗ NODE-HOST-LIBC: the package's native files (its Node runtime, better-sqlite3) need glibc ≥ 2.34, libstdc++ with GLIBCXX_3.4.29 and CXXABI_1.3.9, and libgcc_s with GCC_3.4; this host's ${oldLibgccDir}/libgcc_s.so.1 lacks GCC_3.4 (it provides up to GCC_3.3.1)`);
  t.match(r.out, /1 blocking finding; nothing was written/);
  const none = await attempt(needsCxxabi, fakeProbe({ libstdcxx: libs.gcc12Libstdcxx, libgccS: async () => undefined }), false);
  t.equal(none.exit, 1, `no libgcc_s.so.1 at all: exit 1: ${none.out}`);
  t.match(none.out, /✗ NODE-HOST-LIBC: .*; this host has no libgcc_s\.so\.1 \(not in the ldconfig cache nor the standard library dirs\)/);
});

t.test('a host whose libstdc++.so.6 and libgcc_s.so.1 define the CXXABI and GCC versions the package needs passes, the check naming them', async (t) => {
  const r = await attempt(needsCxxabi, fakeProbe({ libstdcxx: libs.gcc12Libstdcxx, libgccS: libs.gcc12Libgcc }), false);
  t.equal(r.exit, 0, `exit 0: ${r.out}`);
  t.match(r.out, '✓ C libraries: glibc 2.36, GLIBCXX_3.4.30, CXXABI_1.3.13, GCC_12.0.0 (the package needs glibc ≥ 2.34, libstdc++ with GLIBCXX_3.4.29 and CXXABI_1.3.9, and libgcc_s with GCC_3.4)');
  t.notMatch(r.out, /NODE-HOST-LIBC/);
});

t.test('a package whose manifest records no CXXABI or GCC floor (built before they were recorded) is not checked for them on a host refused for one that does', async (t) => {
  const probe = fakeProbe({
    libstdcxx: libs.oldCxxabi,
    libgccS: async () => {
      throw new Error('libgcc_s.so.1 is looked up only for a package that needs GCC_ versions');
    },
  });
  const { cxxabi: _cxxabi, gcc: _gcc, ...olderFloor } = FLOOR;
  const older = (await buildNodePackage(work, keys, { name: 'glibcxx-floor-only.zpkg', requires: olderFloor })).file;
  const r = await attempt(older, probe, false);
  t.equal(r.exit, 0, `the older package passes: ${r.out}`);
  t.match(r.out, '✓ C libraries: glibc 2.36, GLIBCXX_3.4.30 (the package needs glibc ≥ 2.34 and libstdc++ with GLIBCXX_3.4.29)');
  t.notMatch(r.out, /CXXABI|GCC_/);
  const refused = await attempt(needsCxxabi, fakeProbe({ libstdcxx: libs.oldCxxabi, libgccS: libs.gcc12Libgcc }), false);
  t.equal(refused.exit, 1, 'the same libstdc++ is refused for a package that records CXXABI_1.3.9');
});
