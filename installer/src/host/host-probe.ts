/**
 * The facts about the host the install checks need, behind one narrow interface: the real probe
 * (linux-host-probe.ts) reads /proc, statfs and friends; tests pass a fake to exercise every check.
 * Paths are the host's own (absolute, as systemd will see them); nothing here writes anything.
 */

export interface MountInfo {
  mountPoint: string;
  fsType: string;
  /** Mount options, e.g. ['rw', 'nosuid', 'noexec']. */
  options: string[];
}

export type SelinuxMode = 'enforcing' | 'permissive' | 'disabled';

/** A shared library as the dynamic loader would find it, and every symbol version it defines (.gnu.version_d). */
export interface HostLibrary {
  file: string;
  versions: string[];
}

export interface HostProbe {
  /** process.platform of the host. */
  os(): string;
  /** The CPU architecture as uname -m names it (x86_64, aarch64, …). */
  arch(): string;
  isRoot(): boolean;
  /** MemTotal in bytes; undefined when it cannot be read. */
  memoryBytes(): Promise<number | undefined>;
  /** Free bytes (for unprivileged users) on the filesystem that holds `dir` or its nearest existing ancestor. */
  freeDiskBytes(dir: string): Promise<number | undefined>;
  /** The mount that holds `dir` (longest matching mount point). */
  mountOf(dir: string): Promise<MountInfo | undefined>;
  /**
   * Why `dir` cannot be written — checked on `dir` or its nearest existing ancestor, where the
   * install would create it: that dir and access(2)'s code (EROFS on a read-only mount, EACCES) —
   * or undefined when it can. Writes nothing.
   */
  writeError(dir: string): Promise<{ dir: string; code: string } | undefined>;
  /** Whether systemd is the running service manager (/run/systemd/system exists). */
  systemdRunning(): Promise<boolean>;
  selinuxMode(): Promise<SelinuxMode>;
  /** The SELinux type of `dir` or its nearest existing ancestor (e.g. usr_t); undefined when unknown. */
  selinuxType(dir: string): Promise<string | undefined>;
  /** Names of AppArmor profiles in enforce mode; [] when AppArmor is off. */
  apparmorEnforcedProfiles(): Promise<string[]>;
  /**
   * Why `host:port` cannot be bound right now — the bind error's code (EADDRINUSE, EADDRNOTAVAIL for
   * an address not on this host, ENOTFOUND for a name that does not resolve, EACCES, …) — or
   * undefined when it can (bound and released at once; writes nothing).
   */
  bindError(host: string, port: number): Promise<string | undefined>;
  /**
   * The glibc version the installer runs on (the carried Node's process.report
   * header.glibcVersionRuntime, e.g. '2.36'); undefined on another C library (musl).
   */
  glibcVersion(): string | undefined;
  /** The libstdc++.so.6 the dynamic loader would pick for this CPU; undefined when there is none. */
  libstdcxx(): Promise<HostLibrary | undefined>;
  /** The libgcc_s.so.1 the dynamic loader would pick for this CPU; undefined when there is none. */
  libgccS(): Promise<HostLibrary | undefined>;
}
