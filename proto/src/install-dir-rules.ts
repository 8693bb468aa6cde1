/**
 * Where a node install dir must not be (seed 004 §9.2), as both sides judge it: the control plane
 * when a node is created (control-plane/src/nodes/node-validation.ts) and the installer before any
 * write (installer/src/install/install-dir-rules.ts). One list, so the two can never disagree.
 */

/**
 * The §9.2 roots, and the tmpfs and pseudo filesystems that would lose an install: `/run/user`
 * before `/run`, so a dir there is said to be under `/run/user`.
 */
export const FORBIDDEN_INSTALL_ROOTS = [
  '/tmp', '/var/tmp', '/home', '/root', '/run/user', '/usr', '/etc', '/boot', '/run', '/var/run', '/dev', '/proc', '/sys',
] as const;

/** Why a root is refused, said after it where the name alone does not tell. */
const FORBIDDEN_ROOT_REASONS: Partial<Record<(typeof FORBIDDEN_INSTALL_ROOTS)[number], string>> = {
  '/run': 'a tmpfs, wiped on reboot',
  '/var/run': 'a link to /run, a tmpfs wiped on reboot',
  '/dev': 'device files and /dev/shm, a tmpfs: not a real disk',
  '/proc': 'a kernel pseudo filesystem, not a real disk',
  '/sys': 'a kernel pseudo filesystem, not a real disk',
};

const isWithin = (dir: string, root: string): boolean => dir === root || dir.startsWith(`${root}/`);

/**
 * `must not be under /run (a tmpfs, wiped on reboot)` for a (normalised, absolute) dir under a
 * forbidden root, else undefined.
 */
export function forbiddenInstallRootRule(dir: string): string | undefined {
  const root = FORBIDDEN_INSTALL_ROOTS.find((r) => isWithin(dir, r));
  if (root === undefined) return undefined;
  const reason = FORBIDDEN_ROOT_REASONS[root];
  return `must not be under ${root}${reason === undefined ? '' : ` (${reason})`}`;
}

/**
 * The roots of the kernel pseudo filesystems and device files: no disk at all, so no node state dir
 * may be there either (and Node's recursive mkdir under /proc never returns).
 */
export const PSEUDO_FILESYSTEM_ROOTS = ['/dev', '/proc', '/sys'] as const;

/** forbiddenInstallRootRule's words for a (normalised, absolute) dir under /dev, /proc or /sys, else undefined. */
export function pseudoFilesystemRule(dir: string): string | undefined {
  return PSEUDO_FILESYSTEM_ROOTS.some((root) => isWithin(dir, root)) ? forbiddenInstallRootRule(dir) : undefined;
}
