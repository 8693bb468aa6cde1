/**
 * A CPU architecture as uname -m and the node packages name it (x86_64, aarch64), from Node's
 * `process.arch` name (x64, arm64) — the name nodes report to the control plane.
 */
const UNAME_ARCH: Record<string, string> = { x64: 'x86_64', arm64: 'aarch64', arm: 'armv7l', ia32: 'i686', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64' };

/** The uname name of `arch`; a name that is one already, or unknown, as given. */
export function unameArch(arch: string): string {
  return (Object.hasOwn(UNAME_ARCH, arch) ? UNAME_ARCH[arch] : undefined) ?? arch;
}
