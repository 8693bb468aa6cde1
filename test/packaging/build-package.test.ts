/**
 * `npm run package` end to end: one real build (x86_64; the Node runtime and the rebuilt
 * better-sqlite3 come from .zenova/cache/, so only the first run on a machine is slow) shared by
 * the tests below. The package verifies with the installer's own verifier; a changed byte is
 * refused; the carried node runs and loads the rebuilt native module; the launchers start the
 * bundled daemon and CLI; the installer tarball carries `zenova`, its runtime and the public key;
 * both carry THIRD-PARTY-NOTICES with the license texts of the npm packages they ship; the signed
 * manifest records the glibc floor of the native files, and the compiled module is cached per build
 * host libc.
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { verifyPackage } from '../../installer/src/package/package-verifier.js';
import { extractPackage } from '../../installer/src/package/package-extract.js';
import { productVersion } from '../../proto/src/product-version.js';
import { PROTOCOL_VERSION } from '../../proto/src/index.js';
import { REPO_ROOT, buildPackages, installerTarballName } from '../../packaging/build-package.js';
import { nativeModuleFiles } from '../../packaging/native-modules.js';
import { nodeRuntime } from '../../packaging/node-runtime.js';
import { compareDottedVersions } from '../../installer/src/package/libc-requirements.js';
import { createReleaseKey } from '../../packaging/release-key.js';
import { flipByte, offsetOf, releaseKeys } from '../installer/package-builder.js';

const run = promisify(execFile);
const work = mkdtempSync(path.join(tmpdir(), 'zn-packaging-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const key = createReleaseKey(path.join(work, 'key'));
const publicKeyPem = readFileSync(key.publicKeyFile, 'utf8');
const result = await buildPackages({
  arches: ['x86_64'],
  signingKeyFile: key.privateKeyFile,
  outDir: path.join(work, 'dist'),
  cacheDir: path.join(REPO_ROOT, '.zenova', 'cache'),
  log: (line) => t.comment(line),
});
const built = result.built[0];
if (built === undefined) throw new Error(`the x86_64 package was not built: ${JSON.stringify(result.skipped)}`);

const release = path.join(work, 'release');
const verdict = await verifyPackage(built.packageFile, publicKeyPem);
if (!verdict.ok) throw new Error(`the built package does not verify: ${verdict.code} ${verdict.cause}`);
await extractPackage(built.packageFile, verdict.manifest, verdict.dataOffset, release);

t.test('the package is named after its version and platform and verifies with the release public key', async (t) => {
  t.equal(path.basename(built.packageFile), `zenova-node-${productVersion()}-linux-x86_64.zpkg`);
  t.match(verdict.manifest, { product: 'zenova-node', version: productVersion(), platform: { os: 'linux', arch: 'x86_64' }, protocolVersion: PROTOCOL_VERSION });
  const paths = verdict.manifest.files.map((f) => f.path);
  for (const p of ['bin/zenova-node', 'bin/zenova', 'runtime/bin/node', 'app/edge-node/zenova-node.mjs', 'app/installer/zenova.mjs', 'app/node_modules/better-sqlite3/build/Release/better_sqlite3.node', 'share/systemd/node-edge.service', 'share/systemd/zenova-node-update.service', 'release-signing-key.pub.pem']) {
    t.ok(paths.includes(p), `carries ${p}`);
  }
  t.equal(verdict.manifest.files.find((f) => f.path === 'bin/zenova-node')?.mode, 0o755, 'the launcher is executable');
  t.equal(readFileSync(path.join(release, 'release-signing-key.pub.pem'), 'utf8'), publicKeyPem, 'the CLI in the release trusts the signing key');
  t.match(readFileSync(path.join(release, 'share/systemd/node-edge.service'), 'utf8'), /Type=notify[\s\S]*ProtectSystem=strict/);
});

t.test('one changed byte in the packaged daemon is refused as a checksum failure', async (t) => {
  const tampered = path.join(work, 'tampered.zpkg');
  copyFileSync(built.packageFile, tampered);
  flipByte(tampered, offsetOf(tampered, 'zenova-node: unexpected failure'));
  const v = await verifyPackage(tampered, publicKeyPem);
  t.match(v, { ok: false, code: 'NODE-PKG-CHECKSUM' });
});

t.test('a package is refused by an installer that trusts another release key', async (t) => {
  const v = await verifyPackage(built.packageFile, releaseKeys().publicKeyPem);
  t.match(v, { ok: false, code: 'NODE-PKG-SIGNATURE' });
});

t.test('the build writes SHA256SUMS beside the package and the installer tarball, and sha256sum -c passes both', async (t) => {
  t.equal(result.checksumsFile, path.join(work, 'dist', 'SHA256SUMS'));
  const names = readFileSync(path.join(work, 'dist', 'SHA256SUMS'), 'utf8').trim().split('\n').map((line) => line.split('  ')[1]);
  t.same(names, [path.basename(built.packageFile), path.basename(built.installerFile)]);
  const { stdout } = await run('sha256sum', ['-c', 'SHA256SUMS'], { cwd: path.join(work, 'dist') });
  t.match(stdout, /\.zpkg: OK\n.*\.tar\.gz: OK/);
});

t.test('the carried node runtime runs and loads the better-sqlite3 rebuilt for it', async (t) => {
  const node = path.join(release, 'runtime/bin/node');
  const { stdout: version } = await run(node, ['--version']);
  t.match(version.trim(), /^v22\.\d+\.\d+$/, 'the package carries Node 22');
  const script = `const Database = require(${JSON.stringify(path.join(release, 'app/node_modules/better-sqlite3'))});
const db = new Database(':memory:');
db.exec('create table t (v integer)'); db.prepare('insert into t values (?)').run(42);
process.stdout.write(String(db.prepare('select v from t').get().v));`;
  const { stdout } = await run(node, ['-e', script]);
  t.equal(stdout, '42', 'an in-memory database works through the rebuilt module');
  if (!process.version.startsWith('v22.')) {
    // The build machine's Node has another ABI: loading fails there, which shows the module was rebuilt.
    const host = await run(process.execPath, ['-e', script]).then(() => 'loaded', (err: Error) => err.message);
    t.match(host, /NODE_MODULE_VERSION|was compiled against a different Node\.js version/, `the build machine's ${process.version} cannot load it`);
  }
});

t.test('the launchers start the bundled daemon and CLI with the carried runtime', async (t) => {
  const help = await run(path.join(release, 'bin/zenova-node'), ['help']);
  t.match(help.stdout, /serve/);
  const cli = await run(path.join(release, 'bin/zenova'), ['--help']);
  t.match(cli.stdout, /install node/);
  // The CLI's --env-file is the CLI's, not Node's (Node reads one after the script's name as its own).
  const missing = path.join(release, 'no-such.env');
  const envFile = await run(path.join(release, 'bin/zenova'), ['gateway-node', 'list', '--env-file', missing]).then(
    () => ({ code: 0, stderr: '' }),
    (err: { code?: number; stderr?: string }) => ({ code: err.code, stderr: err.stderr ?? '' }),
  );
  t.equal(envFile.code, 2, 'exit 2, not Node\'s 9');
  t.match(envFile.stderr, `zenova: cannot read env file ${missing}: ENOENT`);
});

/** A package's own license text as it sits in node_modules (line ends normalised, as the notices quote it). */
function licenseText(name: string, file = 'LICENSE'): string {
  return readFileSync(path.join(REPO_ROOT, 'node_modules', name, file), 'utf8').replace(/\r\n?/g, '\n').trimEnd();
}

t.test('the release carries THIRD-PARTY-NOTICES quoting the license of every npm package bundled or shipped', async (t) => {
  t.equal(verdict.manifest.files.find((f) => f.path === 'THIRD-PARTY-NOTICES')?.mode, 0o644, 'the notices file is in the signed manifest');
  const notices = readFileSync(path.join(release, 'THIRD-PARTY-NOTICES'), 'utf8');
  for (const name of ['fastify', 'undici', '@grpc/grpc-js', 'pino', 'better-sqlite3', 'bindings', 'file-uri-to-path']) {
    const pkg = JSON.parse(readFileSync(path.join(REPO_ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string; license: string };
    t.match(notices, `\n${name} ${pkg.version}\nLicense: ${pkg.license}\n`, `${name} ${pkg.version} is listed with its license`);
    t.match(notices, licenseText(name, name === 'bindings' ? 'LICENSE.md' : 'LICENSE'), `${name}'s license text is quoted in full`);
  }
  // esbuild names every inlined file in a comment: the packages seen there, derived without the metafile.
  const bundles = ['app/edge-node/zenova-node.mjs', 'app/installer/zenova.mjs'].map((f) => readFileSync(path.join(release, f), 'utf8')).join('\n');
  const inlined = new Set([...bundles.matchAll(/^\/\/ (?:.*\/)?node_modules\/((?:@[^/\s]+\/)?[^/\s]+)\//gm)].map((m) => m[1]!));
  t.ok(inlined.size > 40, `the bundles inline many npm packages (${inlined.size})`);
  for (const name of inlined) t.match(notices, new RegExp(`^  ${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} \\S+ \\(`, 'm'), `${name} (inlined) is listed`);
});

t.test('the shipped native module dirs keep their license files and drop dotfiles', async (t) => {
  for (const f of ['better-sqlite3/LICENSE', 'bindings/LICENSE.md', 'file-uri-to-path/LICENSE']) {
    t.ok(existsSync(path.join(release, 'app/node_modules', f)), `app/node_modules/${f} ships`);
  }
  const paths = verdict.manifest.files.map((f) => f.path);
  t.same(paths.filter((p) => p.split('/').some((part) => part.startsWith('.'))), [], 'no .npmignore, .travis.yml or other dotfile ships');
});

t.test('the installer tarball carries zenova, its runtime and the release public key', async (t) => {
  t.equal(path.basename(built.installerFile), `${installerTarballName(productVersion(), 'x86_64')}.tar.gz`);
  const out = path.join(work, 'installer');
  mkdirSync(out);
  // As the operator manual says: unpacked in a staging dir, `./zenova` is right there.
  await run('tar', ['xzf', built.installerFile], { cwd: out });
  t.equal(readFileSync(path.join(out, 'release-signing-key.pub.pem'), 'utf8'), publicKeyPem);
  t.equal(readFileSync(path.join(out, 'THIRD-PARTY-NOTICES'), 'utf8'), readFileSync(path.join(release, 'THIRD-PARTY-NOTICES'), 'utf8'), 'the same notices as the release');
  const cli = await run('./zenova', ['--help'], { cwd: out, env: { PATH: '/usr/bin:/bin' } });
  t.match(cli.stdout, /install node/, 'runs with no node on PATH');
  const { stdout } = await run(path.join(out, 'runtime/bin/node'), ['--version']);
  t.match(stdout.trim(), /^v22\./);
});

/** The highest `<prefix>x.y…` standing alone between NUL bytes anywhere in the files. */
function highestNameInBytes(files: string[], prefix: 'GLIBC_' | 'GLIBCXX_' | 'CXXABI_' | 'GCC_'): string | undefined {
  const found = files.flatMap((f) => [...readFileSync(f).toString('latin1').matchAll(new RegExp(`(?<=\\0)${prefix}(\\d+(?:\\.\\d+)+)(?=\\0)`, 'g'))].map((m) => m[1]!));
  return found.sort(compareDottedVersions).at(-1);
}

t.test('the signed manifest records the glibc floor (GLIBC, GLIBCXX, CXXABI, GCC) of the carried node and the rebuilt better-sqlite3', async (t) => {
  const natives = ['runtime/bin/node', 'app/node_modules/better-sqlite3/build/Release/better_sqlite3.node'].map((p) => path.join(release, p));
  const requires = verdict.manifest.requires;
  t.same(
    requires,
    { glibc: highestNameInBytes(natives, 'GLIBC_'), glibcxx: highestNameInBytes(natives, 'GLIBCXX_'), cxxabi: highestNameInBytes(natives, 'CXXABI_'), gcc: highestNameInBytes(natives, 'GCC_') },
    'the highest GLIBC_, GLIBCXX_, CXXABI_ and GCC_ names in their bytes',
  );
  t.same(built.manifest.requires, requires, 'as the build returned it');
  // The carried Node 22 alone needs glibc 2.28 / GLIBCXX_3.4.21 / CXXABI_1.3.9 / GCC_3.4; the module was compiled (and loads) here.
  t.ok(compareDottedVersions(requires?.glibc ?? '0', '2.28') >= 0, `glibc floor ${requires?.glibc} is at least Node 22's 2.28`);
  t.ok(compareDottedVersions(requires?.glibcxx ?? '0', '3.4.21') >= 0, `GLIBCXX floor ${requires?.glibcxx} is at least 3.4.21`);
  t.ok(compareDottedVersions(requires?.cxxabi ?? '0', '1.3.9') >= 0, `CXXABI floor ${requires?.cxxabi} is at least 1.3.9`);
  t.ok(compareDottedVersions(requires?.gcc ?? '0', '3.4') >= 0, `GCC floor ${requires?.gcc} is at least 3.4`);
  const hostGlibc = (process.report.getReport() as { header: { glibcVersionRuntime?: string } }).header.glibcVersionRuntime;
  if (hostGlibc !== undefined) t.ok(compareDottedVersions(requires?.glibc ?? '99', hostGlibc) <= 0, `no higher than this build host's glibc ${hostGlibc}`);
});

t.test('the rebuilt better-sqlite3 is cached per build host libc, so a cache made on another host is not reused', async (t) => {
  const cacheDir = path.join(REPO_ROOT, '.zenova', 'cache');
  const runtime = await nodeRuntime(cacheDir, 'x86_64', () => {});
  const native = await nativeModuleFiles(REPO_ROOT, cacheDir, runtime, () => {});
  const source = native.files.find((f) => f.path.endsWith('.node'))?.source ?? '';
  const hostGlibc = (process.report.getReport() as { header: { glibcVersionRuntime?: string } }).header.glibcVersionRuntime;
  t.match(path.basename(path.dirname(source)), new RegExp(`-linux-x86_64-${hostGlibc === undefined ? 'libc-unknown' : `glibc-${hostGlibc.replace('.', '\\.')}`}$`));
});
