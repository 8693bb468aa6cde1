/**
 * A package's glibc floor: the oldest glibc and libstdc++ its native files (the carried Node
 * runtime, the .node modules) load with. It is the highest GLIBC_x.y and GLIBCXX_3.4.z symbol
 * version they need, because the dynamic loader refuses a file that needs a version the host's
 * library does not define (ERR_DLOPEN_FAILED "GLIBC_2.34 not found") — only when the file is
 * loaded, long after an install has used its token. Packaging records it in the signed manifest;
 * the installer compares the host against it before writing anything.
 */

export interface LibcRequirements {
  /** e.g. '2.34': needs GLIBC_2.34 from libc.so.6 (and friends). */
  glibc?: string;
  /** e.g. '3.4.29': needs GLIBCXX_3.4.29 from libstdc++.so.6. */
  glibcxx?: string;
}

const GLIBC = /^GLIBC_(\d+(?:\.\d+)+)$/;
const GLIBCXX = /^GLIBCXX_(\d+(?:\.\d+)+)$/;

/** Numeric comparison of dotted versions ('2.9' < '2.34'); missing parts count as 0. */
export function compareDottedVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

function highest(names: Iterable<string>, pattern: RegExp): string | undefined {
  let best: string | undefined;
  for (const name of names) {
    const v = pattern.exec(name)?.[1];
    if (v !== undefined && (best === undefined || compareDottedVersions(v, best) > 0)) best = v;
  }
  return best;
}

/** The highest GLIBC_ version (GLIBC_PRIVATE and GLIBC_ABI_* are not releases) among `names`. */
export function highestGlibc(names: Iterable<string>): string | undefined {
  return highest(names, GLIBC);
}

/** The highest GLIBCXX_ version among `names`. */
export function highestGlibcxx(names: Iterable<string>): string | undefined {
  return highest(names, GLIBCXX);
}
