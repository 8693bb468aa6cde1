/**
 * A package's glibc floor: the oldest glibc, libstdc++ and libgcc_s its native files (the carried
 * Node runtime, the .node modules) load with. It is the highest GLIBC_x.y, GLIBCXX_3.4.z,
 * CXXABI_1.3.x and GCC_x.y symbol version they need, because the dynamic loader refuses a file
 * that needs a version the host's library does not define (ERR_DLOPEN_FAILED "GLIBC_2.34 not
 * found", "CXXABI_1.3.9 not found") — only when the file is loaded, long after an install has
 * used its token. Packaging records it in the signed manifest;
 * the installer compares the host against it before writing anything.
 */

export interface LibcRequirements {
  /** e.g. '2.34': needs GLIBC_2.34 from libc.so.6 (and friends). */
  glibc?: string;
  /** e.g. '3.4.29': needs GLIBCXX_3.4.29 from libstdc++.so.6. */
  glibcxx?: string;
  /** e.g. '1.3.9': needs CXXABI_1.3.9 from libstdc++.so.6 (the C++ ABI runtime, versioned apart from GLIBCXX). */
  cxxabi?: string;
  /** e.g. '3.4': needs GCC_3.4 from libgcc_s.so.1 (GCC's runtime: the unwinder, compiler helpers). */
  gcc?: string;
}

const GLIBC = /^GLIBC_(\d+(?:\.\d+)+)$/;
const GLIBCXX = /^GLIBCXX_(\d+(?:\.\d+)+)$/;
// CXXABI_TM_1 and CXXABI_FLOAT128 are feature sets, not releases: no number to compare.
const CXXABI = /^CXXABI_(\d+(?:\.\d+)+)$/;
const GCC = /^GCC_(\d+(?:\.\d+)+)$/;

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

/** The highest CXXABI_ version among `names`. */
export function highestCxxabi(names: Iterable<string>): string | undefined {
  return highest(names, CXXABI);
}

/** The highest GCC_ version among `names`. */
export function highestGcc(names: Iterable<string>): string | undefined {
  return highest(names, GCC);
}
