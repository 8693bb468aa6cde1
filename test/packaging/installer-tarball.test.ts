/**
 * The installer tarball's modes do not depend on the build user's umask: root unpacks it with the
 * archive's modes, so a group- or world-writable dir in it would let another local user replace
 * `./zenova` before the operator runs it with sudo.
 */
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
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
  await writeInstallerTarball(out, 'zenova-installer-x', [
    { path: 'zenova', mode: 0o755, content: Buffer.from('#!/bin/sh\necho hi\n') },
    { path: 'app/installer/zenova.mjs', mode: 0o644, content: Buffer.from('console.log(1)\n') },
    { path: 'runtime/bin/node', mode: 0o755, content: Buffer.from('x') },
  ]);
  const headers = tarHeaders(gunzipSync(readFileSync(out)));
  const dirs = headers.filter((h) => h.type === '5');
  t.same(dirs.map((d) => d.name).sort(), ['zenova-installer-x/', 'zenova-installer-x/app/', 'zenova-installer-x/app/installer/', 'zenova-installer-x/runtime/', 'zenova-installer-x/runtime/bin/'], 'the archive holds the top dir and every parent dir');
  for (const d of dirs) t.equal(d.mode & 0o7777, 0o755, `${d.name} is 0755`);
  for (const h of headers) t.equal(h.mode & 0o022, 0, `${h.name} (${(h.mode & 0o7777).toString(8)}) has no group/other write bit`);
  t.equal(headers.find((h) => h.name === 'zenova-installer-x/zenova')?.mode, 0o755, 'the launcher keeps its 0755');
  t.equal(statSync(out).mode & 0o777, 0o644, 'the tarball file itself is 0644');
});
