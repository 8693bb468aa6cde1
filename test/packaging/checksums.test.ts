/**
 * SHA256SUMS, which `npm run package` writes beside the packages and installer tarballs: the
 * installer's advice for a damaged download is to check the file against it, so `sha256sum -c`
 * must read it, pass the files as written and catch a changed byte.
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { CHECKSUMS_FILE, writeChecksums } from '../../packaging/build-package.js';
import { flipByte } from '../installer/package-builder.js';

const run = promisify(execFile);
const dir = mkdtempSync(path.join(tmpdir(), 'zn-sums-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

t.test('SHA256SUMS lists every file by name, sha256sum -c passes them and refuses one changed byte', async (t) => {
  const pkg = path.join(dir, 'zenova-node-0.1.0-linux-x86_64.zpkg');
  const tarball = path.join(dir, 'zenova-installer-0.1.0-linux-x86_64.tar.gz');
  writeFileSync(pkg, Buffer.alloc(3 * 1024 * 1024, 5));
  writeFileSync(tarball, 'installer bytes');
  const sums = await writeChecksums(dir, [pkg, tarball]);
  t.equal(sums, path.join(dir, CHECKSUMS_FILE));
  t.match(readFileSync(sums, 'utf8'), /^[0-9a-f]{64} {2}zenova-node-0\.1\.0-linux-x86_64\.zpkg\n[0-9a-f]{64} {2}zenova-installer-0\.1\.0-linux-x86_64\.tar\.gz\n$/);
  const ok = await run('sha256sum', ['-c', CHECKSUMS_FILE], { cwd: dir });
  t.match(ok.stdout, /zpkg: OK\n.*tar\.gz: OK/);
  flipByte(pkg, 1024 * 1024);
  const failed = await run('sha256sum', ['-c', CHECKSUMS_FILE], { cwd: dir }).then(
    () => undefined,
    (err: { stdout: string }) => err.stdout,
  );
  t.match(failed, /zpkg: FAILED/, 'sha256sum -c fails on the changed package');
});

t.test("a second build run into the same dir (the other architecture, on its own machine) keeps the first run’s lines and replaces only those of the files it wrote", async (t) => {
  const sub = mkdtempSync(path.join(dir, 'two-runs-'));
  const x86 = path.join(sub, 'zenova-node-0.1.0-linux-x86_64.zpkg');
  const arm = path.join(sub, 'zenova-node-0.1.0-linux-aarch64.zpkg');
  writeFileSync(x86, 'x86 package');
  await writeChecksums(sub, [x86]);
  writeFileSync(arm, 'arm package');
  await writeChecksums(sub, [arm]);
  writeFileSync(x86, 'x86 package, rebuilt');
  // An older release's package, listed once, then deleted from the dir.
  const old = path.join(sub, 'zenova-node-0.0.9-linux-x86_64.zpkg');
  writeFileSync(old, 'old');
  await writeChecksums(sub, [old]);
  rmSync(old);
  await writeChecksums(sub, [x86]);
  const lines = readFileSync(path.join(sub, CHECKSUMS_FILE), 'utf8').trimEnd().split('\n');
  t.same(lines.map((line) => line.slice(66)).sort(), ['zenova-node-0.1.0-linux-aarch64.zpkg', 'zenova-node-0.1.0-linux-x86_64.zpkg'], 'one line per file there, none for a file no longer there');
  const ok = await run('sha256sum', ['-c', CHECKSUMS_FILE], { cwd: sub });
  t.match(ok.stdout, /aarch64\.zpkg: OK/);
  t.match(ok.stdout, /x86_64\.zpkg: OK/, 'the rebuilt file by its new sum');
});

t.test('a SHA256SUMS converted to CRLF line ends (or written in binary mode, `*name`) still keeps the other files’ lines', async (t) => {
  const sub = mkdtempSync(path.join(dir, 'crlf-'));
  const x86 = path.join(sub, 'zenova-node-0.1.0-linux-x86_64.zpkg');
  const arm = path.join(sub, 'zenova-node-0.1.0-linux-aarch64.zpkg');
  const tgz = path.join(sub, 'zenova-installer-0.1.0-linux-aarch64');
  writeFileSync(x86, 'x86 package');
  writeFileSync(arm, 'arm package');
  writeFileSync(tgz, 'arm installer');
  await writeChecksums(sub, [arm, tgz]);
  const sums = path.join(sub, CHECKSUMS_FILE);
  const [armLine, tgzLine] = readFileSync(sums, 'utf8').trimEnd().split('\n');
  writeFileSync(sums, `${armLine}\r\n${tgzLine!.replace('  ', ' *')}\r\n`);
  await writeChecksums(sub, [x86]);
  const lines = readFileSync(sums, 'utf8').trimEnd().split('\n');
  t.same(lines.map((line) => line.slice(66)).sort(), ['zenova-installer-0.1.0-linux-aarch64', 'zenova-node-0.1.0-linux-aarch64.zpkg', 'zenova-node-0.1.0-linux-x86_64.zpkg']);
  const ok = await run('sha256sum', ['-c', CHECKSUMS_FILE], { cwd: sub });
  t.equal(ok.stdout.match(/: OK/g)?.length, 3, 'every line checks');
});
