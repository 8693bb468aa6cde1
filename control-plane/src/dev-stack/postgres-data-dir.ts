/**
 * Where the dev stack's PostgreSQL cluster lives: in the dev home, unless the unprivileged postgres
 * user cannot reach it there (a checkout under /root); then under /var/lib/zenova-dev/<hash of the
 * home's path>. That outside dir outlives the checkout: a fresh clone at the same path would find
 * the old cluster, whose password went with the old dev state, and fail to log in. So when the dev
 * state is new, a cluster left there is removed first (nothing else can refer to it).
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

export const OUTSIDE_BASE = '/var/lib/zenova-dev';

export interface DataDirChoice {
  dir: string;
  /** A leftover cluster of an earlier checkout at the same path that was removed. */
  removedLeftover: boolean;
}

export function choosePostgresDataDir(
  home: string,
  opts: { freshState: boolean; homeReachable: boolean; outsideBase?: string },
): DataDirChoice {
  if (opts.homeReachable) return { dir: join(home, 'postgres'), removedLeftover: false };
  const id = createHash('sha256').update(home).digest('hex').slice(0, 12);
  const parent = join(opts.outsideBase ?? OUTSIDE_BASE, id);
  const dir = join(parent, 'postgres');
  let removedLeftover = false;
  if (opts.freshState && existsSync(dir)) {
    rmSync(dir, { recursive: true, force: true });
    removedLeftover = true;
  }
  mkdirSync(parent, { recursive: true, mode: 0o755 });
  return { dir, removedLeftover };
}
