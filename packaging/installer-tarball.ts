/**
 * The installer tarball: `zenova-installer-<version>-linux-<arch>.tar.gz`, holding the `zenova`
 * launcher, the Node runtime, the bundled CLI and the release public key it trusts, **at the top
 * level** (no top dir): the operator unpacks it in a staging dir of their own on the node host,
 * puts the package beside it as `zenova-node.zpkg` and runs `sudo ./zenova install node --package …`
 * there, exactly as the operator manual's steps say (`tar xzf <installer>.tar.gz`, then `./zenova`).
 * No `.` entry either: root's tar would give the staging dir the archive's mode.
 * Staged in a temp dir and packed with the system tar (owner root, fixed mtime-free order).
 */
import { execFile } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { PackageEntry } from './zpkg/write-package.js';

const run = promisify(execFile);

/** Sets `dir` and every directory below it to 0755. */
function chmodDirsTo755(dir: string): void {
  chmodSync(dir, 0o755);
  for (const entry of readdirSync(dir, { withFileTypes: true })) if (entry.isDirectory()) chmodDirsTo755(path.join(dir, entry.name));
}

export async function writeInstallerTarball(out: string, entries: PackageEntry[]): Promise<void> {
  const stage = mkdtempSync(path.join(tmpdir(), 'zn-installer-'));
  try {
    for (const entry of entries) {
      const target = path.join(stage, entry.path);
      mkdirSync(path.dirname(target), { recursive: true });
      if (Buffer.isBuffer(entry.content)) writeFileSync(target, entry.content);
      else copyFileSync(entry.content.file, target);
      chmodSync(target, entry.mode);
    }
    // mkdir took its mode from the build user's umask (0777 under umask 0), and root's tar keeps the
    // archive's modes: a writable dir would let any local user swap ./zenova before `sudo ./zenova`.
    // So every dir is 0755 here, and tar drops group/other write from whatever it packs as a second guard.
    for (const entry of readdirSync(stage, { withFileTypes: true })) if (entry.isDirectory()) chmodDirsTo755(path.join(stage, entry.name));
    // The top-level names, not `.`: the archive must not carry an entry for the dir it is unpacked in.
    const top = readdirSync(stage).sort();
    await run('tar', ['-czf', out, '--owner=0', '--group=0', '--numeric-owner', '--mode=go-w', '--sort=name', '-C', stage, '--', ...top]);
    // tar creates the file with the umask's mode; the tarball is a release artefact, not a shared scratch file.
    chmodSync(out, 0o644);
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}
