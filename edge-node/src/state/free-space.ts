/**
 * Free space in the state dir's filesystem, for `status` and `doctor`. Below MIN_FREE_BYTES the
 * node is about to stop (or has stopped) writing its spool, and with it accepting requests
 * (ZN_ERR_SPOOL_FULL): the spool's WAL alone may grow to 8 MiB between checkpoints, and a rotated
 * credential or a pushed config must still fit.
 */
import { statfsSync } from 'node:fs';

export const MIN_FREE_BYTES = 64 * 1024 * 1024;

export interface FreeSpace {
  /** Bytes this (unprivileged) process may still write. */
  freeBytes: number;
  minFreeBytes: number;
  low: boolean;
}

export function freeSpaceOf(dir: string): FreeSpace {
  const fs = statfsSync(dir);
  const freeBytes = fs.bavail * fs.bsize;
  return { freeBytes, minFreeBytes: MIN_FREE_BYTES, low: freeBytes < MIN_FREE_BYTES };
}
