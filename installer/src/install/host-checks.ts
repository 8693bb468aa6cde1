/**
 * Every check `zenova install node` runs before it writes anything (seed 004 §9.2, DESIGN §7), in
 * the order the operator reads them. Each check reports a label (✓) or its findings (✗ NODE-…);
 * the result carries what the install needs next (the verified manifest, the CA, the control
 * plane's facts). Nothing here writes: host facts come from the HostProbe, units from the
 * ServiceManager, and files are only read.
 */
import { readFile, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { readRegularFileWithin } from '../../../proto/src/bounded-regular-file.js';
import type { BoundedFileRefusal } from '../../../proto/src/bounded-regular-file.js';
import { PROTOCOL_VERSION } from '../../../proto/src/index.js';
import { proxyFor } from '../../../edge-node/src/net/proxy-policy.js';
import type { ProxyServer } from '../../../edge-node/src/net/proxy-policy.js';
import { holdsPrivateKeyPem, isCertificatePem, separatePemBlocks } from '../../../edge-node/src/state/pem.js';
import type { HostProbe } from '../host/host-probe.js';
import type { ServiceManager } from '../host/service-manager.js';
import { RELEASE_KEY_ADVICE, packageShapeProblem, releaseKeyDamaged, releaseKeyProblem, verifyPackage } from '../package/package-verifier.js';
import { RELEASE_KEY_NAME } from '../package/release-key.js';
import { NODE_ENTRYPOINT, PACKAGE_ARCHES, PACKAGE_PRODUCT } from '../package/package-manifest.js';
import type { PackageManifest } from '../package/package-manifest.js';
import { describeCaFile, probeGateway } from './control-plane-probe.js';
import { parseGatewayTarget } from '../../../edge-node/src/control/gateway-channel.js';
import type { CaFile, ControlPlaneFacts, ControlPlaneProbe, GatewayProbe } from './control-plane-probe.js';
import { UNFINISHED_UPGRADE_ADVICE, finding } from './diagnostics.js';
import type { Finding } from './diagnostics.js';
import { foreignInstallDirEntries } from './install-dir-contents.js';
import { installDirOwnershipFindings } from './install-dir-ownership.js';
import { installDirLocationProblem, installDirProblem, normaliseInstallDir } from './install-dir-rules.js';
import type { InstallDirProblem } from './install-dir-rules.js';
import { libcFindings, libcLabel, needsLibgccS, needsLibstdcxx } from './libc-check.js';
import { NODE_UNIT, installDirFromUnit, installLayout, onHost } from './install-layout.js';
import { readNodeEnv } from './env-file.js';
import { formatListen, parseListen } from './listen-address.js';
import type { ListenAddress } from './listen-address.js';
import { pathExists } from './path-exists.js';
import { resolveLinksOnHost } from './resolve-on-host.js';
import type { DanglingLink, ResolvedOnHost } from './resolve-on-host.js';
import { installedLeaf, installedTlsCertFile } from './node-tls-probe.js';
import type { InstalledTlsCert } from './node-tls-probe.js';
import { compareReleaseVersions, readInstalledNode } from './installed-node.js';
import type { InstalledNode } from './installed-node.js';

export const MIN_MEMORY_BYTES = 1024 ** 3;
/**
 * What MemTotal must reach: the kernel and firmware keep part of RAM, so a host with 1 GiB reads
 * about 0.93–0.98 GiB there, and the documented minimum would refuse the host it names.
 */
export const MIN_MEM_TOTAL_BYTES = MIN_MEMORY_BYTES * 7 / 8;
/** What each node-edge process beyond the first adds to a node's memory needs (`serve --replicas K`). */
export const MEMORY_PER_EXTRA_REPLICA_BYTES = 512 * 1024 ** 2;

/** A node of K replicas: 1 GiB plus 512 MiB for each process beyond the first. */
export function replicasMemoryNeed(replicas: number): number {
  return MIN_MEMORY_BYTES + Math.max(0, replicas - 1) * MEMORY_PER_EXTRA_REPLICA_BYTES;
}

/**
 * NODE-HOST-MEMORY-REPLICAS (a warning): the count is known only from the enrollment (or upgrade)
 * answer, after the token is used, so a short host is told, not refused. MemTotal is judged with the
 * same 7/8 allowance as the 1 GiB check.
 */
export function replicasMemoryFinding(memory: number | undefined, replicas: number): Finding | undefined {
  if (memory === undefined || replicas <= 1) return undefined;
  const need = replicasMemoryNeed(replicas);
  if (memory >= need * 7 / 8) return undefined;
  return finding('NODE-HOST-MEMORY-REPLICAS', `this host has ${formatBytes(memory)} of memory; the node's ${replicas} replicas (node-edge processes) need about ${formatBytes(need)}`);
}

/** Room for the spool, config cache and logs beyond the unpacked release. */
export const MIN_SPARE_DISK_BYTES = 1024 ** 3;
export const MAX_CLOCK_SKEW_MS = 30_000;
const MAX_CA_FILE_BYTES = 256 * 1024;

/**
 * Without a usable release key the package is still read as far as it can be (packageShapeProblem:
 * opened, its header's shape checked), so a missing, unreadable or malformed file is reported beside
 * the key's NODE-PKG-SIGNATURE, never hidden by it.
 */
async function packageFindingsWithoutKey(packageFile: string): Promise<Finding[]> {
  const problem = await packageShapeProblem(packageFile);
  return problem === undefined ? [] : [finding(problem.code, problem.cause)];
}

/** Why the --ca-file was not read, as the NODE-CP-CA-FILE finding says it. */
function caFileProblem(refusal: BoundedFileRefusal): string {
  switch (refusal.reason) {
    case 'missing':
    case 'unreadable':
      return refusal.code;
    case 'not-regular':
      return 'not a regular file';
    case 'too-large':
      return `larger than ${MAX_CA_FILE_BYTES / 1024} KiB`;
  }
}

/** NODE-CP-CA-FILE's advice for a CA file holding a private key: the key stays out of the node. */
function caKeyAdvice(file: string): string {
  return `Pass a file with the CA certificate only (e.g. openssl x509 -in ${file} -out ca.crt, then --ca-file ca.crt), and keep the private key off this host; then run the command again.`;
}

/** The control plane's own service; a host running it is the central host (seed 004 §9.2). */
export const CONTROL_PLANE_UNIT = 'zenova-control.service';
/** Filesystems kept in memory only: whatever the node writes there is gone after a reboot. */
const MEMORY_FS_TYPES = new Set(['tmpfs', 'ramfs', 'devtmpfs']);
/** SELinux types that systemd (init_t) may not execute programs from. */
const SELINUX_NON_EXEC_TYPES = new Set(['tmp_t', 'user_tmp_t', 'user_home_t', 'user_home_dir_t', 'default_t', 'unlabeled_t', 'nfs_t', 'cifs_t', 'fusefs_t', 'removable_t']);

export type CheckMode = 'install' | 'check-only' | 'reenroll' | 'upgrade';

export interface CheckInput {
  mode: CheckMode;
  /** '/' in production; every host path is read under it. */
  hostRoot: string;
  /** The --install-dir as given (undefined: the default, or the installed one for --reenroll). */
  installDir: string | undefined;
  defaultInstallDir: string;
  packageFile: string;
  trustedKeyPem: string | undefined;
  /** Why the release key file exists but could not be read (e.g. EACCES); every package is refused then. */
  trustedKeyUnreadable?: string;
  controlPlaneUrl: string;
  caFile: CaFile | undefined;
  listen: ListenAddress;
  probe: HostProbe;
  services: ServiceManager;
  probeControlPlane: ControlPlaneProbe;
  /** The node gateway check (default: the real TCP and TLS probe, control-plane-probe.ts probeGateway). */
  probeGateway?: GatewayProbe;
  /** The environment the proxy variables are read from (default process.env, as the probe reads them). */
  env?: NodeJS.ProcessEnv;
}

export interface CheckResult {
  findings: Finding[];
  installDir: string;
  /**
   * --reenroll where no unit exists but the install dir's data/ holds an identity (a failed
   * install's rollback kept it): the install writes everything again around that data/.
   */
  keptData: boolean;
  manifest?: PackageManifest;
  dataOffset?: number;
  caPem?: string;
  controlPlane?: ControlPlaneFacts;
  /** --upgrade: the node installed here (its dir, release, identity). */
  installed?: InstalledNode;
}

/** Receives each check as it completes: a ✓ label, or the findings of a ✗. */
export type CheckReporter = (label: string, findings: readonly Finding[]) => void;

function formatBytes(n: number): string {
  return n >= 1024 ** 3 ? `${(n / 1024 ** 3).toFixed(1)} GiB` : `${Math.round(n / 1024 ** 2)} MiB`;
}

/** What a bind error means for the operator, by its code. */
const BIND_ERROR_MEANINGS: Record<string, string> = {
  EADDRNOTAVAIL: 'the address is not one of this host\'s',
  ENOTFOUND: 'the name does not resolve',
  EAI_AGAIN: 'the name could not be resolved (DNS did not answer)',
  EACCES: 'permission denied (ports below 1024 need root)',
  EAFNOSUPPORT: 'this host does not support the address family',
};

/** The listening-port check: a port in use, or an address node-edge could never bind (§9.2). */
/** `address` as formatListen writes it (IPv6 in brackets). */
function listenFindings(address: string, bindError: string | undefined): Finding[] {
  if (bindError === undefined) return [];
  if (bindError === 'EADDRINUSE') return [finding('NODE-PORT-IN-USE', `${address} is already in use by another program`)];
  const meaning = Object.hasOwn(BIND_ERROR_MEANINGS, bindError) ? `: ${BIND_ERROR_MEANINGS[bindError]}` : '';
  return [finding('NODE-LISTEN-UNAVAILABLE', `node-edge cannot listen on ${address} (--listen): binding it fails with ${bindError}${meaning}`)];
}

/**
 * The installed node's ZENOVA_NODE_LISTEN (in its etc/node.env, `envFile`): the line's value
 * (undefined without one, or when the file cannot be read) and its address when that is HOST:PORT.
 * --reenroll keeps that address, --upgrade restarts node-edge with it.
 */
export async function readInstalledListen(hostRoot: string, installDir: string): Promise<{ envFile: string; text: string | undefined; listen: ListenAddress | undefined }> {
  const envFile = installLayout(installDir).envFile;
  const text = (await readNodeEnv(onHost(hostRoot, envFile))).ZENOVA_NODE_LISTEN;
  return { envFile, text, listen: text === undefined ? undefined : parseListen(text) };
}

/** Why an installed ZENOVA_NODE_LISTEN value readInstalledListen found no address in is refused. */
export function unusableListen(text: string, envFile: string): string {
  return `the installed node's listen address ${JSON.stringify(text)} (ZENOVA_NODE_LISTEN in ${envFile}) is not HOST:PORT ([IPv6]:PORT for an IPv6 address), so node-edge cannot start with it`;
}

/**
 * --upgrade restarts node-edge with the installed etc/node.env: a listen address it cannot start
 * with, or a certificate file it cannot read, would fail the new release and the previous one
 * alike, and only after the token was used and the switch made. Found here, nothing is written.
 */
async function installedEnvFindings(hostRoot: string, installDir: string): Promise<{ label: string; findings: Finding[] }> {
  const { envFile, text, listen } = await readInstalledListen(hostRoot, installDir);
  const findings: Finding[] = [];
  if (text === undefined) findings.push(finding('NODE-UPGRADE-ENV', `${envFile} gives no ZENOVA_NODE_LISTEN (the line is missing, or the file cannot be read), so node-edge cannot start: its unit passes that line to --listen`));
  else if (listen === undefined) findings.push(finding('NODE-UPGRADE-ENV', unusableListen(text, envFile)));
  let cert: InstalledTlsCert | undefined;
  try {
    cert = await installedTlsCertFile(hostRoot, installLayout(installDir));
  } catch (err) {
    findings.push(finding('NODE-UPGRADE-ENV', (err as Error).message));
  }
  if (cert !== undefined) {
    try {
      installedLeaf(cert.certPem);
    } catch (err) {
      findings.push(finding('NODE-UPGRADE-ENV', `the node's TLS certificate ${cert.file} (ZENOVA_NODE_TLS_CERT_FILE in ${envFile}) holds no usable PEM certificate: ${(err as Error).message}`));
      cert = undefined;
    }
  }
  const serves = cert !== undefined ? `HTTPS with ${cert.file}` : 'plain HTTP';
  return { label: listen !== undefined ? `${envFile}: node-edge listens on ${formatListen(listen)} (${serves})` : envFile, findings };
}

const WILDCARD_HOSTS = new Set(['0.0.0.0', '::']);

/** Whether a bind of `b` would collide with a listener on `a` because it is that listener (same port, same or wildcard host). */
function sameSocket(a: ListenAddress, b: ListenAddress): boolean {
  return a.port === b.port && (a.host === b.host || WILDCARD_HOSTS.has(a.host) || WILDCARD_HOSTS.has(b.host));
}

export async function runHostChecks(input: CheckInput, report: CheckReporter): Promise<CheckResult> {
  const all: Finding[] = [];
  const check = (label: string, findings: Finding[]): boolean => {
    all.push(...findings);
    report(label, findings);
    return findings.every((f) => !f.blocking);
  };
  const { probe, services } = input;

  check('running as root', probe.isRoot() ? [] : [finding('NODE-HOST-ROOT', 'the installer runs without root privileges')]);
  check(`Linux host`, probe.os() === 'linux' ? [] : [finding('NODE-HOST-OS', `this host runs ${probe.os()}, not Linux`)]);

  // Existing installation: the node-edge unit is what marks one (it names the install dir).
  const unit = await services.readUnit(NODE_UNIT);
  const installedDir = unit === undefined ? undefined : (installDirFromUnit(unit) ?? '(unknown dir)');
  const existing: Finding[] = [];
  if ((await services.readUnit(CONTROL_PLANE_UNIT)) !== undefined) {
    existing.push(finding('NODE-HOST-CONTROL-PLANE', `this host runs the control plane (${CONTROL_PLANE_UNIT} is installed)`));
  }
  const keepsDir = input.mode === 'reenroll' || input.mode === 'upgrade';
  const installDir = keepsDir && installedDir !== undefined && input.installDir === undefined ? installedDir : normaliseInstallDir(input.installDir ?? input.defaultInstallDir);
  const rule = installDirProblem(installDir) ?? (await linkedInstallDirProblem(input.hostRoot, installDir));
  const identityFile = `${installLayout(installDir).data}/identity.json`;
  // Without a unit, a data/ holding an identity is an installation whose rollback kept its data:
  // --reenroll is the only way back to it (the seed forbids deleting the node dir).
  const keptData = input.mode === 'reenroll' && installedDir === undefined && rule === undefined && (await pathExists(onHost(input.hostRoot, identityFile)));
  let existingLabel = input.mode === 'reenroll' ? 'gateway node installed on this host' : 'no gateway node installed on this host yet';
  let installed: InstalledNode | undefined;
  if (input.mode === 'upgrade') {
    const lookup = await readInstalledNode(input.hostRoot, services);
    if (lookup.ok) {
      installed = lookup.node;
      existingLabel = `gateway node ${installed.nodeName} installed in ${installed.installDir} (version ${installed.version})`;
    } else {
      existing.push(finding('NODE-UPGRADE-NONE', lookup.cause));
    }
  } else if (input.mode === 'reenroll') {
    if (keptData) existingLabel = `no ${NODE_UNIT}, but ${identityFile} is kept from an earlier install: it is installed again around that data`;
    else if (installedDir === undefined) existing.push(finding('NODE-REENROLL-NONE', `no gateway node is installed on this host (no ${NODE_UNIT}, and no ${identityFile})`));
  } else if (installedDir !== undefined) {
    existing.push(finding('NODE-INSTALLED', `a gateway node is already installed on this host (in ${installedDir})`));
  }
  check(existingLabel, existing);

  // Checks that apply as to a new install: nothing of the node runs or is installed around data/.
  const writesRelease = input.mode !== 'reenroll' || keptData;
  const dirFindings: Finding[] = [];
  if (rule !== undefined) dirFindings.push(finding(rule.code, `install dir ${installDir} ${rule.rule}`));
  if (input.mode === 'reenroll' && installedDir !== undefined && installDir !== installedDir) {
    dirFindings.push(finding('NODE-DIR-MISMATCH', `--install-dir ${installDir} is not the installed node's dir ${installedDir}`));
  }
  // The installed node's own dir is covered by NODE-INSTALLED already.
  if (rule === undefined && writesRelease && installDir !== installedDir) dirFindings.push(...(await installDirState(input.hostRoot, installDir, keptData)));
  // Every mode: node-edge runs as root from it (an upgrade or reenroll would start it again).
  if (rule === undefined) dirFindings.push(...(await installDirOwnershipFindings(input.hostRoot, installDir, new Set([0, process.getuid?.() ?? 0]))));
  check(`install dir ${installDir}`, dirFindings);
  if (installed !== undefined) {
    const env = await installedEnvFindings(input.hostRoot, installed.installDir);
    check(env.label, env.findings);
  }

  const result: CheckResult = { findings: all, installDir, keptData, ...(installed !== undefined ? { installed } : {}) };

  // The package: signature and checksums first, then what it claims to be.
  const pkgFindings: Finding[] = [];
  // A missing or damaged release key is the installer's fault, not the package's: its own advice.
  const keyProblem = input.trustedKeyUnreadable !== undefined ? `cannot read it: ${input.trustedKeyUnreadable}` : input.trustedKeyPem === undefined ? undefined : releaseKeyProblem(input.trustedKeyPem);
  if (keyProblem !== undefined) {
    pkgFindings.push(finding('NODE-PKG-SIGNATURE', releaseKeyDamaged(keyProblem), RELEASE_KEY_ADVICE));
    pkgFindings.push(...(await packageFindingsWithoutKey(input.packageFile)));
  } else if (input.trustedKeyPem === undefined) {
    pkgFindings.push(finding('NODE-PKG-SIGNATURE', `this installer carries no trusted release key (${RELEASE_KEY_NAME}), so no package can be verified`, RELEASE_KEY_ADVICE));
    pkgFindings.push(...(await packageFindingsWithoutKey(input.packageFile)));
  } else {
    const verdict = await verifyPackage(input.packageFile, input.trustedKeyPem);
    if (!verdict.ok) {
      pkgFindings.push(finding(verdict.code, verdict.cause));
    } else {
      const m = verdict.manifest;
      if (m.product !== PACKAGE_PRODUCT) pkgFindings.push(finding('NODE-PKG-PRODUCT', `the package is "${m.product}", not a ${PACKAGE_PRODUCT} package`));
      else if (!m.files.some((f) => f.path === NODE_ENTRYPOINT && (f.mode & 0o111) !== 0)) pkgFindings.push(finding('NODE-PKG-PRODUCT', `the package has no executable ${NODE_ENTRYPOINT}`));
      else {
        result.manifest = m;
        result.dataOffset = verdict.dataOffset;
      }
    }
  }
  check(result.manifest ? `package ${input.packageFile}: ${result.manifest.product} ${result.manifest.version} (${result.manifest.platform.os}/${result.manifest.platform.arch}), signature and checksums verified` : `package ${input.packageFile}`, pkgFindings);

  const arch = probe.arch();
  const archFindings: Finding[] = [];
  if (!(PACKAGE_ARCHES as readonly string[]).includes(arch)) archFindings.push(finding('NODE-HOST-ARCH', `this host's CPU is ${arch}; nodes run on ${PACKAGE_ARCHES.join(' or ')}`));
  else if (result.manifest !== undefined && result.manifest.platform.arch !== arch) {
    archFindings.push(finding('NODE-HOST-ARCH', `the package is for ${result.manifest.platform.arch}, this host's CPU is ${arch}`));
  }
  check(`CPU architecture ${arch}`, archFindings);

  // The glibc floor the package's native files need; a package built before it was recorded has none.
  const requires = result.manifest?.requires;
  if (requires !== undefined && Object.values(requires).some((v) => v !== undefined)) {
    const host = {
      glibc: probe.glibcVersion(),
      libstdcxx: needsLibstdcxx(requires) ? await probe.libstdcxx() : undefined,
      libgccS: needsLibgccS(requires) ? await probe.libgccS() : undefined,
    };
    check(libcLabel(requires, host), libcFindings(requires, host));
  }

  const memory = await probe.memoryBytes();
  check(
    `memory ${memory === undefined ? 'unknown' : formatBytes(memory)}`,
    memory !== undefined && memory < MIN_MEM_TOTAL_BYTES ? [finding('NODE-HOST-MEMORY', `this host has ${formatBytes(memory)} of memory; a node needs at least ${formatBytes(MIN_MEMORY_BYTES)}`)] : [],
  );

  const releaseBytes = !writesRelease ? 0 : (result.manifest?.files.reduce((n, f) => n + f.size, 0) ?? 0);
  const needed = releaseBytes + MIN_SPARE_DISK_BYTES;
  const free = await probe.freeDiskBytes(installDir);
  const mount = await probe.mountOf(installDir);
  check(
    `free disk at ${installDir}: ${free === undefined ? 'unknown' : formatBytes(free)}`,
    free !== undefined && free < needed ? [finding('NODE-HOST-DISK', `${formatBytes(free)} free at ${installDir}; the node needs ${formatBytes(needed)} (release ${formatBytes(releaseBytes)} + spool and state ${formatBytes(MIN_SPARE_DISK_BYTES)})`)] : [],
  );

  // A read-only mount passes every check above; the install's mkdir would then fail (seen as ENOENT).
  const writable: Finding[] = [];
  const writeError = await probe.writeError(installDir);
  if (mount?.options.includes('ro') === true) writable.push(finding('NODE-DIR-READ-ONLY', `${installDir} is on ${mount.mountPoint} (${mount.fsType}), mounted read-only`));
  // Without root, EACCES is the missing root NODE-HOST-ROOT names, not a file system refusing root;
  // ENOENT or ELOOP through the dir's links is what NODE-DIR-DANGLING-LINK or NODE-DIR-FORMAT said.
  else if (writeError !== undefined && (probe.isRoot() || (writeError.code !== 'EACCES' && writeError.code !== 'EPERM')) && !(rule !== undefined && (writeError.code === 'ENOENT' || writeError.code === 'ELOOP'))) writable.push(finding('NODE-DIR-READ-ONLY', `${installDir} cannot be written: ${writeError.dir} refuses writes (${writeError.code}${writeError.code === 'EROFS' ? ': read-only file system' : ''})`));
  // A filesystem in memory: the node's identity, spool and unsent billable records would vanish at reboot.
  if (mount !== undefined && MEMORY_FS_TYPES.has(mount.fsType)) writable.push(finding('NODE-DIR-IN-MEMORY', `${installDir} is on ${mount.mountPoint} (${mount.fsType}), a filesystem in memory: the node's identity, spool and unsent billable records would be lost at the next reboot`));
  check(`install dir ${installDir} writable`, writable);

  check('systemd is the service manager', (await probe.systemdRunning()) ? [] : [finding('NODE-HOST-SYSTEMD', 'systemd is not running as the service manager (no /run/systemd/system)')]);

  const execFindings: Finding[] = [];
  if (mount?.options.includes('noexec')) execFindings.push(finding('NODE-HOST-NOEXEC', `${installDir} is on ${mount.mountPoint} (${mount.fsType}), mounted noexec`));
  if ((await probe.selinuxMode()) === 'enforcing') {
    const type = await probe.selinuxType(installDir);
    if (type !== undefined && SELINUX_NON_EXEC_TYPES.has(type)) execFindings.push(finding('NODE-HOST-SELINUX', `SELinux is enforcing and ${installDir} is labelled ${type}, which services may not execute`));
  }
  const profiles = (await probe.apparmorEnforcedProfiles()).filter((p) => p === installDir || p.startsWith(`${installDir}/`));
  if (profiles.length > 0) execFindings.push(finding('NODE-HOST-APPARMOR', `AppArmor profile ${profiles[0] ?? ''} (enforce) covers ${installDir}`));
  check('programs may run from the install dir (mount options, SELinux, AppArmor)', execFindings);

  // A reenroll or an upgrade keeps the running node's port: it is in use by that node, as it should be.
  if (writesRelease && input.mode !== 'upgrade') {
    const { host, port } = input.listen;
    const address = formatListen(input.listen);
    // The same command run again on an installed host: NODE-INSTALLED says it all; its node holding
    // its own port is no other program's.
    const installedListen = installedDir === undefined ? undefined : (await readInstalledListen(input.hostRoot, installedDir)).listen;
    if (installedListen !== undefined && sameSocket(installedListen, input.listen)) check(`port ${address} is the installed node's own`, []);
    else check(`port ${address} free`, listenFindings(address, await probe.bindError(host, port)));
  }

  if (input.caFile !== undefined) {
    const caFindings: Finding[] = [];
    // Read only if a regular file of at most MAX_CA_FILE_BYTES (a device or FIFO refused unread).
    const read = readRegularFileWithin(input.caFile.path, MAX_CA_FILE_BYTES);
    // Certificates concatenated without a newline between them are put on lines of their own.
    const text = read.ok ? separatePemBlocks(read.text) : undefined;
    if (!read.ok) caFindings.push(finding('NODE-CP-CA-FILE', `${describeCaFile(input.caFile)}: ${caFileProblem(read)}`));
    // A cert+key bundle: the key would be copied (0644), handed to the probe and stored by the
    // enrollment. Refused here, before anything is written; the key itself is never printed.
    else if (holdsPrivateKeyPem(read.text)) caFindings.push(finding('NODE-CP-CA-FILE', `${describeCaFile(input.caFile)} holds a private key beside its certificate: nothing was written`, caKeyAdvice(input.caFile.path)));
    else if (text !== undefined && isCertificatePem(text)) result.caPem = text;
    else caFindings.push(finding('NODE-CP-CA-FILE', `${describeCaFile(input.caFile)}: no PEM certificate in it`));
    check(`CA file ${input.caFile.path}`, caFindings);
  }

  if (input.caFile === undefined || result.caPem !== undefined) {
    const cp = await input.probeControlPlane(input.controlPlaneUrl, result.caPem, input.caFile);
    if (!cp.ok) {
      check(`control plane ${input.controlPlaneUrl} reachable over HTTPS`, [cp.finding]);
    } else {
      result.controlPlane = cp.facts;
      check(`control plane ${cp.facts.url.host} reachable over HTTPS (version ${cp.facts.version})`, []);
      // A run that writes node-edge's unit: the service it starts must take the route this check took.
      if (writesRelease && input.mode !== 'upgrade') {
        const proxy = proxyForUrl(cp.facts.url, input.env ?? process.env);
        if (proxy !== undefined) check(`node-edge will reach the control plane through the proxy ${proxy.label} (${proxy.source}) too`, await serviceProxyFindings(input.hostRoot, proxy));
      }
      // The port nodes use after enrollment: a run that enrolls (not --upgrade, whose node keeps the
      // gateway it was given) checks it before the token is used, as node-edge's control link will dial it.
      if (input.mode !== 'upgrade') {
        const gateway = cp.facts.gateway;
        if (gateway === undefined) {
          check('node gateway not checked', [finding('NODE-CP-GATEWAY-UNCHECKED', `the control plane (version ${cp.facts.version}) does not say where nodes dial its node gateway, so that port was not checked`)]);
        } else {
          const reached = await (input.probeGateway ?? probeGateway)(gateway, cp.facts.url, input.env ?? process.env);
          check(reached.ok ? reached.label : `node gateway ${gateway.target} reachable over TCP and TLS`, reached.ok ? [] : [reached.finding]);
          // The control link dials the gateway from node-edge's service, which has none of this
          // shell's variables: a gateway this check reached through a proxy needs the drop-in too,
          // also when the control plane itself was reached directly (no_proxy naming only it).
          const gatewayProxy = reached.ok && writesRelease ? proxyForTarget(gateway.target, input.env ?? process.env) : undefined;
          if (gatewayProxy !== undefined && proxyForUrl(cp.facts.url, input.env ?? process.env) === undefined) {
            check(`node-edge will reach the node gateway through the proxy ${gatewayProxy.label} (${gatewayProxy.source}) too`, await serviceProxyFindings(input.hostRoot, gatewayProxy, 'the node gateway'));
          }
        }
      }
      const skew = cp.facts.skewMs;
      check(
        `clock skew ${(Math.abs(skew) / 1000).toFixed(1)} s (at most ${MAX_CLOCK_SKEW_MS / 1000} s)`,
        Math.abs(skew) > MAX_CLOCK_SKEW_MS ? [finding('NODE-CLOCK-SKEW', `this host's clock is ${Math.round(Math.abs(skew) / 1000)} s ${skew > 0 ? 'behind' : 'ahead of'} the control plane's`)] : [],
      );
      if (result.manifest !== undefined) {
        const m = result.manifest;
        const match: Finding[] = [];
        // Finishing an upgrade killed after its switch redeems no token: the control plane agreed to
        // that version and its protocol then, and may run newer ones since (the node goes on to them
        // with a new command). Refusing would leave the host half-upgraded.
        const finishes = installed?.interrupted?.to === installed?.version && m.version === installed?.version;
        const protocolMoved = m.protocolVersion !== cp.facts.protocolVersion;
        if (m.version !== cp.facts.version && !finishes) match.push(finding('NODE-PKG-VERSION', `the package is version ${m.version}, the control plane runs ${cp.facts.version}`));
        if ((protocolMoved && !finishes) || m.protocolVersion !== PROTOCOL_VERSION) {
          match.push(finding('NODE-CP-PROTOCOL', `the package speaks control protocol ${m.protocolVersion}, the control plane ${cp.facts.protocolVersion} (this installer ${PROTOCOL_VERSION})`));
        }
        check(
          (m.version === cp.facts.version && !protocolMoved) || !finishes
            ? `package version ${m.version} matches the control plane`
            : `package version ${m.version} is the interrupted upgrade's, agreed by the control plane then (it runs ${cp.facts.version} now` +
                `${protocolMoved ? `, speaking control protocol ${cp.facts.protocolVersion} where the package speaks ${m.protocolVersion}` : ''}): ` +
                'not checked against its current version and protocol',
          match,
        );
      }
    }
  }
  if (installed !== undefined && result.manifest !== undefined) {
    const to = result.manifest.version;
    const interrupted = installed.interrupted;
    const versionFindings: Finding[] = [];
    if (interrupted !== undefined && interrupted.to === installed.version) {
      // Killed after the switch: this run finishes that upgrade (or switches back), with its package.
      if (to !== interrupted.to) versionFindings.push(finding('NODE-UPGRADE-VERSION', `an upgrade from ${interrupted.from} to ${interrupted.to} was switched in at ${interrupted.at} and never finished; run it again with the ${interrupted.to} package to finish it (or switch back), not with ${to}`, UNFINISHED_UPGRADE_ADVICE));
      check(`finish the upgrade from ${interrupted.from} to ${interrupted.to} interrupted at ${interrupted.at}`, versionFindings);
    } else {
      const order = compareReleaseVersions(to, installed.version);
      // Versions that differ only in build metadata (0.1.0+b2, 0.1.0+b1) rank alike: a rebuild is
      // taken when it is the control plane's version, so the node can match it.
      const rebuildOfControlPlane = to !== installed.version && result.controlPlane?.version === to;
      if (order === 0 && to === installed.version) versionFindings.push(finding('NODE-UPGRADE-VERSION', `the installed node already runs version ${installed.version}, the package's`));
      else if (order === 0 && !rebuildOfControlPlane) {
        versionFindings.push(finding('NODE-UPGRADE-VERSION', `the package's version ${to} differs from the installed ${installed.version} only in build metadata, and is not the control plane's version${result.controlPlane !== undefined ? ` (${result.controlPlane.version})` : ''}: use the control plane's package`));
      }
      else if (order === -1) versionFindings.push(finding('NODE-UPGRADE-VERSION', `the package is version ${to}, older than the installed ${installed.version}: an upgrade never goes back`));
      check(`upgrade from ${installed.version} to ${to}`, versionFindings);
    }
  }
  return result;
}

/**
 * A new install's dir must be absent, empty, or the remains of a rolled-back attempt (its etc/ and
 * data/ holding only the installer's and the node's files: install-dir-contents.ts); its data/ may
 * hold an identity only when --reenroll installs around it (`identityAllowed`).
 */
/**
 * A valid install dir whose symbolic links lead somewhere the rules forbid (`/data` → `/home/data`):
 * the unit's ProtectHome=/PrivateTmp= would hide the release from node-edge, so it is refused like
 * the dir it leads to. An unresolvable dir (a link loop) is refused too, and so is one that is, or is
 * under, a link whose target does not exist (a volume not mounted yet): stat() would call it absent,
 * every check would pass, and the install's mkdir would fail with a bare ENOENT or ENOTDIR.
 */
async function linkedInstallDirProblem(hostRoot: string, dir: string): Promise<InstallDirProblem | undefined> {
  let resolved: ResolvedOnHost;
  try {
    resolved = await resolveLinksOnHost(hostRoot, dir);
  } catch (err) {
    return { code: 'NODE-DIR-FORMAT', rule: `cannot be resolved: ${(err as Error).message}` };
  }
  const { real, dangling } = resolved;
  // Where it leads first: a link into /home stays refused once its target exists.
  const problem = real === dir ? undefined : installDirLocationProblem(real);
  if (problem !== undefined) return { code: problem.code, rule: `leads to ${real} through a symbolic link, which ${problem.rule}` };
  return dangling === undefined ? undefined : { code: 'NODE-DIR-DANGLING-LINK', rule: danglingLinkRule(dir, dangling) };
}

/** How NODE-DIR-DANGLING-LINK names the link, after "install dir DIR ". */
function danglingLinkRule(dir: string, { link, target }: DanglingLink): string {
  const where = link === dir ? 'is a symbolic link' : dir.startsWith(`${link}/`) ? `is under ${link}, a symbolic link` : `leads through ${link}, a symbolic link`;
  return `${where} to ${target}, which does not exist: mount the volume or fix the link`;
}

async function installDirState(hostRoot: string, dir: string, identityAllowed: boolean): Promise<Finding[]> {
  const physical = onHost(hostRoot, dir);
  let entries: string[];
  try {
    const info = await stat(physical);
    if (!info.isDirectory()) return [finding('NODE-DIR-NOT-EMPTY', `${dir} exists and is not a directory`)];
    entries = await readdir(physical);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    return [finding('NODE-DIR-NOT-EMPTY', `cannot read ${dir} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`)];
  }
  // Foreign files first: an identity.json among them does not make the dir a node's.
  const foreign = await foreignInstallDirEntries(physical, entries);
  if (foreign.length > 0) return [finding('NODE-DIR-NOT-EMPTY', `${dir} already holds ${foreign.slice(0, 3).join(', ')}${foreign.length > 3 ? ', …' : ''}`)];
  const layout = installLayout(dir);
  if (!identityAllowed && (await pathExists(onHost(hostRoot, `${layout.data}/identity.json`)))) {
    return [finding('NODE-DATA-EXISTS', `${layout.data} holds the identity of a node installed here before`)];
  }
  return [];
}

/** The proxy the variables give for a `HOST:PORT` gateway target (undefined: none, bypassed, or a target or setting the probe reports). */
function proxyForTarget(target: string, env: NodeJS.ProcessEnv): ProxyServer | undefined {
  try {
    const { host, port } = parseGatewayTarget(target);
    return proxyFor(host, port, env);
  } catch {
    return undefined;
  }
}

/** The proxy the variables give for `url`'s host and port (undefined: none, or bypassed by no_proxy; an unusable setting is the probe's to report). */
function proxyForUrl(url: URL, env: NodeJS.ProcessEnv): ProxyServer | undefined {
  const port = url.port === '' ? (url.protocol === 'http:' ? 80 : 443) : Number(url.port);
  try {
    return proxyFor(url.hostname.replace(/^\[|\]$/g, ''), port, env);
  } catch {
    return undefined;
  }
}

/** The systemd drop-in dir of node-edge, where its proxy is given (docs/install.md, "Through a proxy"). */
const NODE_DROP_IN_DIR = `/etc/systemd/system/${NODE_UNIT}.d`;

/**
 * The control plane was reached through a proxy, but node-edge runs under systemd, which passes it
 * none of this shell's variables: without a drop-in giving it the proxy (an `https_proxy=` setting,
 * or an EnvironmentFile= whose contents the installer does not read), it could not reach the
 * control plane, and the install would fail after its token was used.
 */
async function serviceProxyFindings(hostRoot: string, proxy: ProxyServer, reached = 'the control plane'): Promise<Finding[]> {
  const dir = onHost(hostRoot, NODE_DROP_IN_DIR);
  let names: string[];
  try {
    names = (await readdir(dir)).filter((name) => name.endsWith('.conf'));
  } catch {
    names = [];
  }
  for (const name of names) {
    const text = await readFile(path.join(dir, name), 'utf8').catch(() => '');
    if (/https_proxy\s*=/i.test(text) || /^\s*EnvironmentFile\s*=/m.test(text)) return [];
  }
  return [
    finding(
      'NODE-CP-PROXY-SERVICE',
      `this check reached ${reached} through the proxy ${proxy.label} (${proxy.source}), but ${NODE_UNIT} runs under systemd without this shell's variables, and no ${NODE_DROP_IN_DIR}/*.conf gives it the proxy`,
    ),
  ];
}
