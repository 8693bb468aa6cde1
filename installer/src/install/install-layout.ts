/**
 * Where everything of a node installation lives (DESIGN §2), as the host sees it, and where the
 * installer writes it. `hostRoot` prefixes every path the installer touches (always '/' in
 * production; a temp dir in tests, so the §9.2 rules apply to the real-looking logical paths).
 */
import path from 'node:path';

export const NODE_UNIT = 'node-edge.service';
export const UPDATER_UNIT = 'zenova-node-update.service';
/** What `zenova status` and `zenova logs` say on a host without a node-edge service. */
export const NO_NODE_INSTALLED = 'no gateway node is installed on this host (no node-edge service)';
export const ENV_FILE = 'etc/node.env';
export const CA_FILE = 'etc/control-plane-ca.pem';
/** The caller port's HTTPS pair (`--tls-cert/--tls-key`), copied in: certificate 0644, key 0600. */
export const TLS_CERT_FILE = 'etc/tls-cert.pem';
export const TLS_KEY_FILE = 'etc/tls-key.pem';
export const DEFAULT_NODE_LISTEN = '0.0.0.0:7480';
/** Puts `zenova` on root's PATH (seed 004 §9.5 runs `sudo zenova status`); links to the current release's CLI. */
export const CLI_LINK = '/usr/local/bin/zenova';
/** The CLI inside a release (packaging/release-contents.ts). */
export const RELEASE_CLI = 'bin/zenova';

export interface InstallLayout {
  /** The install dir as systemd and the node see it. */
  dir: string;
  releaseDir(version: string): string;
  current: string;
  updater: string;
  data: string;
  etc: string;
  envFile: string;
  caFile: string;
  tlsCertFile: string;
  tlsKeyFile: string;
  releases: string;
  /** The CLI of the current release: what CLI_LINK points to. */
  cli: string;
}

export function installLayout(dir: string): InstallLayout {
  return {
    dir,
    releases: path.posix.join(dir, 'releases'),
    releaseDir: (version) => path.posix.join(dir, 'releases', version),
    current: path.posix.join(dir, 'current'),
    updater: path.posix.join(dir, 'updater'),
    data: path.posix.join(dir, 'data'),
    etc: path.posix.join(dir, 'etc'),
    envFile: path.posix.join(dir, ENV_FILE),
    caFile: path.posix.join(dir, CA_FILE),
    tlsCertFile: path.posix.join(dir, TLS_CERT_FILE),
    tlsKeyFile: path.posix.join(dir, TLS_KEY_FILE),
    cli: path.posix.join(dir, 'current', RELEASE_CLI),
  };
}

/**
 * The release version a `current` (or `updater`) link target names: `releases/<version>` as the
 * installer writes it, or the absolute path of that dir (`ln -sfn /opt/zenova-node/releases/0.0.8
 * current`, an operator's manual switch back); undefined for any other target.
 */
export function releaseOfLink(target: string, layout: InstallLayout): string | undefined {
  const trimmed = target.replace(/\/+$/, '');
  const relative = /^releases\/([^/]+)$/.exec(trimmed)?.[1];
  if (relative !== undefined) return relative;
  return path.posix.isAbsolute(trimmed) && path.posix.dirname(trimmed) === layout.releases ? path.posix.basename(trimmed) : undefined;
}

/** The physical path of a host path under `hostRoot`. */
export function onHost(hostRoot: string, hostPath: string): string {
  return hostRoot === '/' ? hostPath : path.join(hostRoot, hostPath);
}

/** The install dir named by an installed node-edge unit (its EnvironmentFile=), or undefined. */
export function installDirFromUnit(unitText: string): string | undefined {
  const m = /^EnvironmentFile=-?(\/\S+)\/etc\/node\.env\s*$/m.exec(unitText);
  return m?.[1];
}
