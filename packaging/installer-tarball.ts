/**
 * The installer tarball: `zenova-installer-<version>-linux-<arch>.tar.gz`, one top dir holding the
 * `zenova` launcher, the Node runtime, the bundled CLI and the release public key it trusts. An
 * operator unpacks it on the node host and runs `sudo ./zenova install node --package …`.
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

export async function writeInstallerTarball(out: string, topDir: string, entries: PackageEntry[]): Promise<void> {
  const stage = mkdtempSync(path.join(tmpdir(), 'zn-installer-'));
  try {
    for (const entry of entries) {
      const target = path.join(stage, topDir, entry.path);
      mkdirSync(path.dirname(target), { recursive: true });
      if (Buffer.isBuffer(entry.content)) writeFileSync(target, entry.content);
      else copyFileSync(entry.content.file, target);
      chmodSync(target, entry.mode);
    }
    // mkdir took its mode from the build user's umask (0777 under umask 0), and root's tar keeps the
    // archive's modes: a writable dir would let any local user swap ./zenova before `sudo ./zenova`.
    // So every dir is 0755 here, and tar drops group/other write from whatever it packs as a second guard.
    chmodDirsTo755(path.join(stage, topDir));
    await run('tar', ['-czf', out, '--owner=0', '--group=0', '--numeric-owner', '--mode=go-w', '--sort=name', '-C', stage, topDir]);
    // tar creates the file with the umask's mode; the tarball is a release artefact, not a shared scratch file.
    chmodSync(out, 0o644);
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}
