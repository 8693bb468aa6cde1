/**
 * The ELF reader against real files on this machine: the node binary running this test, the
 * better-sqlite3 .node compiled here, and the libstdc++.so.6 and libgcc_s.so.1 the dynamic loader
 * picked for this process. Expected versions are derived another way: every NUL-terminated
 * GLIBC_/GLIBCXX_/CXXABI_/GCC_ name in the file's bytes, the x86_64/aarch64 glibc baselines, and
 * /proc/self/maps for the library ld.so loaded.
 */
import t from 'tap';
import { readFileSync, realpathSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { readElfSymbolVersions } from '../../installer/src/host/elf-symbol-versions.js';
import { hostLibgccS, hostLibstdcxx, parseLdSoCache } from '../../installer/src/host/libstdcxx-lookup.js';
import { compareDottedVersions, highestCxxabi, highestGcc, highestGlibc, highestGlibcxx } from '../../installer/src/package/libc-requirements.js';

const SQLITE_NODE = path.resolve(import.meta.dirname, '../../node_modules/better-sqlite3/build/Release/better_sqlite3.node');
/** The oldest symbol version of each architecture's glibc ABI: every program needs at least it. */
const GLIBC_BASELINE = process.arch === 'arm64' ? '2.17' : '2.2.5';
const work = mkdtempSync(path.join(tmpdir(), 'zn-elf-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

/** Every `<prefix>x.y…` that stands alone between NUL bytes anywhere in the file. */
function namesInBytes(file: string, prefix: 'GLIBC_' | 'GLIBCXX_' | 'CXXABI_' | 'GCC_'): Set<string> {
  const text = readFileSync(file).toString('latin1');
  return new Set([...text.matchAll(new RegExp(`(?<=\\0)(${prefix}\\d+(?:\\.\\d+)+)(?=\\0)`, 'g'))].map((m) => m[1]!));
}

const hostGlibc = (process.report.getReport() as { header: { glibcVersionRuntime?: string } }).header.glibcVersionRuntime;

for (const [what, file] of [['the node binary running this test', process.execPath], ['the better-sqlite3 .node compiled on this machine', SQLITE_NODE]] as const) {
  t.test(`the reader finds the GLIBC, GLIBCXX, CXXABI and GCC versions ${what} needs, the highest being the highest such name in its bytes`, async (t) => {
    const elf = await readElfSymbolVersions(file);
    if (elf === undefined) throw new Error(`${file} is not read as ELF`);
    t.equal(elf.bits, 64);
    const needed = elf.needed.flatMap((n) => n.versions);
    const inBytes = { glibc: namesInBytes(file, 'GLIBC_'), glibcxx: namesInBytes(file, 'GLIBCXX_') };
    t.same(needed.filter((v) => /^GLIBC(XX)?_\d/.test(v) && !inBytes.glibc.has(v) && !inBytes.glibcxx.has(v)), [], 'every GLIBC_/GLIBCXX_ version read is a string in the file');
    t.equal(highestGlibc(needed), highestGlibc(inBytes.glibc), 'the highest GLIBC_ version');
    t.equal(highestGlibcxx(needed), highestGlibcxx(inBytes.glibcxx), 'the highest GLIBCXX_ version');
    t.equal(highestCxxabi(needed), highestCxxabi(namesInBytes(file, 'CXXABI_')), 'the highest CXXABI_ version');
    t.ok(elf.needed.some((n) => n.file === 'libstdc++.so.6' && n.versions.includes(`CXXABI_${highestCxxabi(needed)}`)), 'the CXXABI_ version is needed from libstdc++.so.6');
    const gcc = highestGcc(needed);
    t.equal(gcc, highestGcc(namesInBytes(file, 'GCC_')), 'the highest GCC_ version (none when it needs nothing versioned of libgcc_s)');
    if (gcc !== undefined) t.ok(elf.needed.some((n) => n.file === 'libgcc_s.so.1' && n.versions.includes(`GCC_${gcc}`)), 'the GCC_ version is needed from libgcc_s.so.1');
    const libc = elf.needed.find((n) => n.file === 'libc.so.6');
    t.ok(libc, 'needs libc.so.6');
    t.ok(elf.needed.some((n) => n.file === 'libstdc++.so.6' && n.versions.includes('GLIBCXX_3.4')), 'needs libstdc++.so.6 with at least GLIBCXX_3.4');
    t.ok(compareDottedVersions(highestGlibc(needed)!, GLIBC_BASELINE) >= 0, `needs at least GLIBC_${GLIBC_BASELINE}`);
    // It runs (or is loadable) here, so this host's glibc meets what it needs.
    if (hostGlibc !== undefined) t.ok(compareDottedVersions(highestGlibc(needed)!, hostGlibc) <= 0, `needs no more than this host's glibc ${hostGlibc}`);
  });
}

/** The file ld.so mapped into this process whose name matches `name`. */
function mappedLibrary(name: RegExp): string | undefined {
  return readFileSync('/proc/self/maps', 'utf8').split('\n').map((l) => l.split(/\s+/)[5] ?? '').find((p) => name.test(p));
}

t.test('the libstdc++.so.6 found through the ldconfig cache is the one the dynamic loader loaded, with the GLIBCXX and CXXABI versions its bytes name', async (t) => {
  const mapped = mappedLibrary(/\/libstdc\+\+\.so\.6(\.|$)/);
  if (mapped === undefined) {
    // A node linked statically against libstdc++: nothing loaded to compare with.
    t.plan(0, 'this node has no libstdc++.so.6 mapped');
    return;
  }
  const lib = await hostLibstdcxx();
  if (lib === undefined) throw new Error('no libstdc++.so.6 found');
  t.equal(realpathSync(lib.file), realpathSync(mapped), `${lib.file} is the loaded ${mapped}`);
  t.same(new Set(lib.versions.filter((v) => v.startsWith('GLIBCXX_'))), namesInBytes(mapped, 'GLIBCXX_'), 'every GLIBCXX_ version defined, and only those');
  t.same(new Set(lib.versions.filter((v) => /^CXXABI_\d/.test(v))), namesInBytes(mapped, 'CXXABI_'), 'every numbered CXXABI_ version defined, and only those');
  // It satisfies the node running this test.
  const nodeNeeds = (await readElfSymbolVersions(process.execPath))!.needed.flatMap((n) => n.versions);
  const glibcxx = highestGlibcxx(nodeNeeds);
  if (glibcxx !== undefined) t.ok(lib.versions.includes(`GLIBCXX_${glibcxx}`), `defines GLIBCXX_${glibcxx}, which this node needs`);
  const cxxabi = highestCxxabi(nodeNeeds);
  if (cxxabi !== undefined) t.ok(lib.versions.includes(`CXXABI_${cxxabi}`), `defines CXXABI_${cxxabi}, which this node needs`);
});

t.test('the libgcc_s.so.1 found through the ldconfig cache is the one the dynamic loader loaded, with the GCC versions its bytes name', async (t) => {
  const mapped = mappedLibrary(/\/libgcc_s\.so\.1$/);
  if (mapped === undefined) {
    t.plan(0, 'this node has no libgcc_s.so.1 mapped');
    return;
  }
  const lib = await hostLibgccS();
  if (lib === undefined) throw new Error('no libgcc_s.so.1 found');
  t.equal(realpathSync(lib.file), realpathSync(mapped), `${lib.file} is the loaded ${mapped}`);
  t.same(new Set(lib.versions), namesInBytes(mapped, 'GCC_'), 'every GCC_ version defined, and only those');
  const gcc = highestGcc((await readElfSymbolVersions(process.execPath))!.needed.flatMap((n) => n.versions));
  if (gcc !== undefined) t.ok(lib.versions.includes(`GCC_${gcc}`), `defines GCC_${gcc}, which this node needs`);
});

t.test('the ldconfig cache lists libc.so.6, and a cache without libstdc++ falls back to the standard dirs', async (t) => {
  t.ok(parseLdSoCache(readFileSync('/etc/ld.so.cache')).some((e) => e.name === 'libc.so.6' && e.path.startsWith('/')), 'libc.so.6 is in /etc/ld.so.cache');
  const empty = path.join(work, 'ld.so.cache');
  writeFileSync(empty, '');
  const lib = await hostLibstdcxx({ cacheFile: empty });
  t.ok(lib, 'found in a standard dir');
  t.same(await hostLibstdcxx({ cacheFile: empty, dirs: [work] }), undefined, 'none where there is none');
});

t.test('a file that is not ELF reads as none, and a truncated ELF file is an error, not a guess', async (t) => {
  const script = path.join(work, 'launcher');
  writeFileSync(script, '#!/bin/sh\nexec true\n');
  t.equal(await readElfSymbolVersions(script), undefined);
  const cut = path.join(work, 'cut.node');
  writeFileSync(cut, readFileSync(SQLITE_NODE).subarray(0, 4096));
  await t.rejects(readElfSymbolVersions(cut), /the file ends inside the ELF/);
});
