// Byte-for-byte comparison of two folders, for telling whether committed codegen is stale.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';

export interface TreeDiff {
  /** Files the expected tree has and the actual one lacks. */
  missing: string[];
  /** Files only in the actual tree. */
  extra: string[];
  /** Files in both whose bytes differ. */
  changed: string[];
}

/** Relative paths (with `/`) of every file under `dir`, sorted; empty when `dir` does not exist. */
export function listFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (entry.isDirectory()) continue;
    out.push(relative(dir, join(entry.parentPath, entry.name)).split(sep).join('/'));
  }
  return out.sort();
}

export function diffTrees(expectedDir: string, actualDir: string): TreeDiff {
  const expected = listFiles(expectedDir);
  const actual = new Set(listFiles(actualDir));
  const diff: TreeDiff = { missing: [], extra: [], changed: [] };
  for (const file of expected) {
    if (!actual.has(file)) diff.missing.push(file);
    else if (!readFileSync(join(expectedDir, file)).equals(readFileSync(join(actualDir, file)))) diff.changed.push(file);
    actual.delete(file);
  }
  diff.extra = [...actual].sort();
  return diff;
}

export function isEmptyDiff(diff: TreeDiff): boolean {
  return diff.missing.length === 0 && diff.extra.length === 0 && diff.changed.length === 0;
}
