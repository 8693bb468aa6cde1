/**
 * The .zpkg verifier: a package signed with the trusted key verifies; one changed byte anywhere
 * (file content, manifest, signature), another key, a truncated or padded file are refused with
 * their NODE-PKG-… code; extraction writes exactly the signed files with their modes. No package may
 * carry release-manifest.json, the installer's own file in a release. A genuine package of a newer
 * release (a signed manifest this installer cannot read) is NODE-PKG-NEWER, not a damaged download.
 */
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync, statSync, truncateSync, appendFileSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyPackage } from '../../installer/src/package/package-verifier.js';
import { extractPackage } from '../../installer/src/package/package-extract.js';
import { RELEASE_MANIFEST_FILE, packageManifestSchema } from '../../installer/src/package/package-manifest.js';
import { LAUNCHER, buildNodePackage, flipByte, offsetOf, releaseKeys, writeSignedManifestPackage } from './package-builder.js';

const keys = releaseKeys();
const dir = mkdtempSync(join(tmpdir(), 'zn-pkg-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

async function fresh(name: string): Promise<string> {
  const built = await buildNodePackage(dir, keys, { name: `${name}.zpkg` });
  return built.file;
}

t.test('a package signed with the trusted key verifies and yields its manifest', async (t) => {
  const file = await fresh('good');
  const verdict = await verifyPackage(file, keys.publicKeyPem);
  t.ok(verdict.ok);
  if (verdict.ok) {
    t.equal(verdict.manifest.product, 'zenova-node');
    t.same(verdict.manifest.files.map((f) => f.path), ['bin/zenova-node', 'bin/zenova', 'app/README.txt', 'app/lib/data.bin']);
  }
});

t.test('one changed byte in a packaged file is refused as NODE-PKG-CHECKSUM', async (t) => {
  const file = await fresh('tampered-content');
  flipByte(file, -10);
  const verdict = await verifyPackage(file, keys.publicKeyPem);
  t.match(verdict, { ok: false, code: 'NODE-PKG-CHECKSUM', cause: /app\/lib\/data\.bin/ });
});

t.test('one changed byte in the manifest is refused as NODE-PKG-SIGNATURE', async (t) => {
  const file = await fresh('tampered-manifest');
  flipByte(file, offsetOf(file, '"version"') + 2);
  t.match(await verifyPackage(file, keys.publicKeyPem), { ok: false, code: 'NODE-PKG-SIGNATURE' });
});

t.test('one changed byte in the signature is refused as NODE-PKG-SIGNATURE', async (t) => {
  const file = await fresh('tampered-signature');
  // The signature's last byte sits right before the first file's bytes (the launcher).
  flipByte(file, offsetOf(file, LAUNCHER.toString()) - 1);
  t.match(await verifyPackage(file, keys.publicKeyPem), { ok: false, code: 'NODE-PKG-SIGNATURE' });
});

t.test('a package signed with another key is refused as NODE-PKG-SIGNATURE', async (t) => {
  const other = releaseKeys();
  const built = await buildNodePackage(dir, other, { name: 'other-key.zpkg' });
  t.match(await verifyPackage(built.file, keys.publicKeyPem), { ok: false, code: 'NODE-PKG-SIGNATURE' });
});

t.test('truncated, padded, foreign and missing files are refused with their codes', async (t) => {
  const truncated = await fresh('truncated');
  truncateSync(truncated, statSync(truncated).size - 1);
  t.match(await verifyPackage(truncated, keys.publicKeyPem), { ok: false, code: 'NODE-PKG-FORMAT', cause: /truncated/ });
  const padded = await fresh('padded');
  appendFileSync(padded, 'x');
  t.match(await verifyPackage(padded, keys.publicKeyPem), { ok: false, code: 'NODE-PKG-FORMAT', cause: /after the last/ });
  const foreign = join(dir, 'foreign.zpkg');
  copyFileSync(new URL(import.meta.url), foreign);
  t.match(await verifyPackage(foreign, keys.publicKeyPem), { ok: false, code: 'NODE-PKG-FORMAT', cause: /magic/ });
  t.match(await verifyPackage(join(dir, 'absent.zpkg'), keys.publicKeyPem), { ok: false, code: 'NODE-PKG-UNREADABLE', cause: /ENOENT/ });
});

t.test('a damaged download is NODE-PKG-FORMAT with the advice to download it again and check its SHA-256', async (t) => {
  const truncated = await fresh('truncated-advice');
  truncateSync(truncated, 20);
  const cut = await verifyPackage(truncated, keys.publicKeyPem);
  t.match(cut, { ok: false, code: 'NODE-PKG-FORMAT', cause: /truncated/, advice: /^download the package again from the release site and check its SHA-256 against the release's SHA256SUMS$/ });
  const foreign = join(dir, 'foreign-advice.zpkg');
  copyFileSync(new URL(import.meta.url), foreign);
  t.match(await verifyPackage(foreign, keys.publicKeyPem), { ok: false, code: 'NODE-PKG-FORMAT', advice: /download the package again/ });
});

t.test('a genuine package of a newer release is NODE-PKG-NEWER naming the fields it does not understand by path, with the advice to use that release\'s installer', async (t) => {
  const newerPart = join(dir, 'newer-part.zpkg');
  writeSignedManifestPackage(newerPart, keys, { version: '9.1.0', requires: { glibc: '2.34', libatomic: 'value-never-echoed' } });
  const verdict = await verifyPackage(newerPart, keys.publicKeyPem);
  t.match(verdict, {
    ok: false,
    code: 'NODE-PKG-NEWER',
    cause: /^the package is signed by the release key, but this installer \(\d[^)]*\) does not understand its manifest \(release 9\.1\.0\): field requires\.libatomic$/,
    advice: /run the command with \.\/zenova from the installer tarball of the package's release \(zenova-installer-<version>-linux-<arch>\.tar\.gz\); downloading the package again does not help/,
  });
  t.notMatch(JSON.stringify(verdict), /value-never-echoed/, 'the field is named, its value is not');

  // Values and top-level parts it does not know alike, each by path.
  const newerValues = join(dir, 'newer-values.zpkg');
  writeSignedManifestPackage(newerValues, keys, { platform: { os: 'linux', arch: 'riscv64' }, attestations: ['value-never-echoed'] });
  const values = await verifyPackage(newerValues, keys.publicKeyPem);
  t.match(values, { ok: false, code: 'NODE-PKG-NEWER', cause: /: fields (platform\.arch, attestations|attestations, platform\.arch)$/ });
  t.notMatch(JSON.stringify(values), /riscv64|value-never-echoed/, 'no value is echoed');
});

t.test('a verified package extracts to exactly its files, contents and modes', async (t) => {
  const file = await fresh('extract');
  const verdict = await verifyPackage(file, keys.publicKeyPem);
  if (!verdict.ok) throw new Error(verdict.cause);
  const dest = join(dir, 'release');
  await extractPackage(file, verdict.manifest, verdict.dataOffset, dest);
  t.same(readFileSync(join(dest, 'bin/zenova-node')), LAUNCHER);
  t.equal(statSync(join(dest, 'bin/zenova-node')).mode & 0o777, 0o755);
  t.equal(statSync(join(dest, 'app/lib/data.bin')).size, 200_000);
  t.equal(statSync(join(dest, 'app/README.txt')).mode & 0o777, 0o644);
});

t.test('extraction re-checks every file and fails when the package changed after verification', async (t) => {
  const file = await fresh('changed-later');
  const verdict = await verifyPackage(file, keys.publicKeyPem);
  if (!verdict.ok) throw new Error(verdict.cause);
  flipByte(file, -1);
  await t.rejects(extractPackage(file, verdict.manifest, verdict.dataOffset, join(dir, 'release-2')), /SHA-256 mismatch/);
});

t.test('a damaged trusted key refuses the package as NODE-PKG-SIGNATURE instead of throwing', async (t) => {
  const file = await fresh('damaged-key');
  for (const key of ['', 'hello', '-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n']) {
    t.match(await verifyPackage(file, key), { ok: false, code: 'NODE-PKG-SIGNATURE', cause: /release key .* is unreadable or damaged .*: unpack the installer again/ }, JSON.stringify(key));
  }
});

t.test('no package may carry release-manifest.json, the file the installer marks its releases with', async (t) => {
  const built = await buildNodePackage(dir, keys, { name: 'marker.zpkg' });
  const parsed = packageManifestSchema.safeParse({ ...built.manifest, files: [...built.manifest.files, { path: RELEASE_MANIFEST_FILE, sha256: '0'.repeat(64), mode: 0o644, size: 0 }] });
  t.notOk(parsed.success);
  t.match(parsed.error?.issues.map((i) => i.message), [/release-manifest\.json is the installer's own file in a release/]);
  await t.rejects(buildNodePackage(dir, keys, { name: 'marker-2.zpkg', entries: [{ path: 'bin/zenova-node', mode: 0o755, content: LAUNCHER }, { path: RELEASE_MANIFEST_FILE, mode: 0o644, content: Buffer.from('{}') }] }), /release-manifest\.json is the installer's own file/);
});

t.test('a signed manifest whose version is not a release dir name (., .., a leading dot) is refused, naming the field', async (t) => {
  // releases/.. would be the install dir itself; a leading dot is how partial unpacks are named.
  for (const version of ['.', '..', '.0.1.0']) {
    const file = join(dir, `version-${Math.random()}.zpkg`);
    writeSignedManifestPackage(file, keys, { version });
    const verdict = await verifyPackage(file, keys.publicKeyPem);
    t.match(verdict, { ok: false, cause: /does not understand its manifest: field version/ }, `version ${JSON.stringify(version)} refused`);
  }
});
