/**
 * The installer tarball's modes do not depend on the build user's umask: root unpacks it with the
 * archive's modes, so a group- or world-writable dir in it would let another local user replace
 * `./zenova` before the operator runs it with sudo. Its files sit at the top level, so the operator
 * manual's `tar xzf` in a staging dir puts `./zenova` there.
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { gunzipSync } from 'node:zlib';
import { writeInstallerTarball } from '../../packaging/installer-tarball.js';

interface TarHeader {
  name: string;
  type: string;
  mode: number;
}

/** The ustar headers of an uncompressed tar (read from the bytes, not from tar's listing). */
function tarHeaders(tar: Buffer): TarHeader[] {
  const out: TarHeader[] = [];
  const text = (from: number, to: number, at: number): string => tar.subarray(at + from, at + to).toString('latin1').replace(/\0.*$/s, '');
  for (let at = 0; at + 512 <= tar.length; ) {
    if (tar.subarray(at, at + 512).every((b) => b === 0)) break;
    const size = parseInt(text(124, 136, at).trim() || '0', 8);
    const prefix = text(345, 500, at);
    const name = text(0, 100, at);
    out.push({ name: prefix === '' ? name : `${prefix}/${name}`, type: text(156, 157, at) || '0', mode: parseInt(text(100, 108, at).trim(), 8) });
    at += 512 + Math.ceil(size / 512) * 512;
  }
  return out;
}

t.test('under umask 0000 every directory and file in the installer tarball is 0755 or tighter, never group or world writable', async (t) => {
  const work = mkdtempSync(path.join(tmpdir(), 'zn-tarball-umask-'));
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  const previous = process.umask(0);
  t.teardown(() => process.umask(previous));
  const out = path.join(work, 'installer.tar.gz');
  await writeInstallerTarball(out, [
    { path: 'zenova', mode: 0o755, content: Buffer.from('#!/bin/sh\necho hi\n') },
    { path: 'app/installer/zenova.mjs', mode: 0o644, content: Buffer.from('console.log(1)\n') },
    { path: 'runtime/bin/node', mode: 0o755, content: Buffer.from('x') },
  ]);
  const headers = tarHeaders(gunzipSync(readFileSync(out)));
  const dirs = headers.filter((h) => h.type === '5');
  t.same(dirs.map((d) => d.name).sort(), ['app/', 'app/installer/', 'runtime/', 'runtime/bin/'], 'the archive holds every parent dir, and no top dir');
  for (const d of dirs) t.equal(d.mode & 0o7777, 0o755, `${d.name} is 0755`);
  for (const h of headers) t.equal(h.mode & 0o022, 0, `${h.name} (${(h.mode & 0o7777).toString(8)}) has no group/other write bit`);
  t.equal(headers.find((h) => h.name === 'zenova')?.mode, 0o755, 'the launcher keeps its 0755');
  t.equal(statSync(out).mode & 0o777, 0o644, 'the tarball file itself is 0644');
});

t.test('unpacked as the operator manual says (tar xzf in a staging dir), ./zenova is right there and the staging dir keeps its own mode', async (t) => {
  const work = mkdtempSync(path.join(tmpdir(), 'zn-tarball-flat-'));
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  const out = path.join(work, 'zenova-installer-0.1.0-linux-x86_64.tar.gz');
  await writeInstallerTarball(out, [
    { path: 'zenova', mode: 0o755, content: Buffer.from('#!/bin/sh\necho hi\n') },
    { path: 'release-signing-key.pub.pem', mode: 0o644, content: Buffer.from('key\n') },
    { path: 'app/installer/zenova.mjs', mode: 0o644, content: Buffer.from('console.log(1)\n') },
  ]);
  const staging = path.join(work, 'zenova-install');
  mkdirSync(staging, { mode: 0o700 });
  chmodSync(staging, 0o700);
  await promisify(execFile)('tar', ['xzf', out], { cwd: staging });
  t.equal(statSync(path.join(staging, 'zenova')).mode & 0o777, 0o755, './zenova is in the staging dir, as `sudo ./zenova install node` expects');
  t.ok(statSync(path.join(staging, 'app/installer/zenova.mjs')).isFile(), 'the bundle beside it');
  t.equal(statSync(staging).mode & 0o777, 0o700, 'the staging dir keeps the mode its owner gave it (the archive has no `.` entry)');
  t.same(readdirSync(staging).sort(), ['app', 'release-signing-key.pub.pem', 'zenova'], 'and nothing else: no top dir');
});
