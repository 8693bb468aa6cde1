/**
 * The installer tarball: `zenova-installer-<version>-linux-<arch>.tar.gz`, one top dir holding the
 * `zenova` launcher, the Node runtime, the bundled CLI and the release public key it trusts. An
 * operator unpacks it on the node host and runs `sudo ./zenova install node --package …`.
 * Staged in a temp dir and packed with the system tar (owner root, fixed mtime-free order).
 */
import { execFile } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { PackageEntry } from './zpkg/write-package.js';

const run = promisify(execFile);

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
    await run('tar', ['-czf', out, '--owner=0', '--group=0', '--numeric-owner', '--sort=name', '-C', stage, topDir]);
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}
