/**
 * Unpacks a verified package into a fresh directory. Every file is hashed again as it is written
 * (the package could change between verification and extraction), so a file on disk is never
 * trusted unless its bytes matched the signed manifest; on any mismatch the caller rolls back.
 */
import { createHash } from 'node:crypto';
import { chmod, mkdir, open } from 'node:fs/promises';
import path from 'node:path';
import type { PackageManifest } from './package-manifest.js';

const CHUNK_BYTES = 1024 * 1024;

export class ExtractError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ExtractError';
  }
}

/** Writes the package's files under `destDir` (which must not exist yet; it is created 0755). */
export async function extractPackage(file: string, manifest: PackageManifest, dataOffset: number, destDir: string): Promise<void> {
  await mkdir(destDir, { mode: 0o755 });
  const source = await open(file, 'r');
  try {
    const buffer = Buffer.alloc(CHUNK_BYTES);
    let position = dataOffset;
    for (const entry of manifest.files) {
      const target = path.join(destDir, entry.path);
      // The schema already forbids '..'; this is the belt to its braces.
      if (!target.startsWith(`${destDir}${path.sep}`)) throw new ExtractError(`${entry.path} would land outside the release dir`);
      await mkdir(path.dirname(target), { recursive: true, mode: 0o755 });
      const out = await open(target, 'wx', 0o600);
      const hash = createHash('sha256');
      try {
        let left = entry.size;
        while (left > 0) {
          const { bytesRead } = await source.read(buffer, 0, Math.min(left, buffer.length), position);
          if (bytesRead === 0) throw new ExtractError(`the package ended inside ${entry.path}`);
          const chunk = buffer.subarray(0, bytesRead);
          hash.update(chunk);
          await out.write(chunk);
          left -= bytesRead;
          position += bytesRead;
        }
        await out.sync();
      } finally {
        await out.close();
      }
      if (hash.digest('hex') !== entry.sha256) throw new ExtractError(`${entry.path} changed since the package was verified (SHA-256 mismatch)`);
      await chmod(target, entry.mode);
    }
  } finally {
    await source.close();
  }
}
