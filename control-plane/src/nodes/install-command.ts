/**
 * The one-line command an operator runs on the node host, exactly in the form of seed 004
 * §9.4/§9.6 (`sudo ./zenova install node …`), so it is copied whole. Every part comes from
 * validated input (URL and install dir restricted to shell-safe characters, base64url tokens), so
 * the line can be pasted into a shell as it is.
 */
import type { InstallTokenKind } from './install-tokens.js';

/** The package file name the generated command uses (the operator renames the download to it). */
export const NODE_PACKAGE_FILE = 'zenova-node.zpkg';
/** Where the operator saves the node's control-plane CA next to the package. */
export const CONTROL_PLANE_CA_FILE = 'zenova-control-plane-ca.pem';

export interface InstallCommandInput {
  kind: InstallTokenKind;
  controlPlaneUrl: string;
  token: string;
  /** Adds `--ca-file zenova-control-plane-ca.pem`. */
  hasCa: boolean;
  /** Adds `--install-dir DIR`, except on upgrade (an upgrade keeps the first install's dir). */
  installDir: string | null;
}

export function installCommand(input: InstallCommandInput): string {
  // As the seed writes it: root, and the `zenova` unpacked from the installer tarball in the
  // current dir (the operator runs it there, beside zenova-node.zpkg; no `zenova` is on PATH yet).
  const parts = ['sudo ./zenova install node', `--package ${NODE_PACKAGE_FILE}`];
  // §9.6 puts --reenroll before --control-plane and --upgrade last.
  if (input.kind === 'reenroll') parts.push('--reenroll');
  parts.push(`--control-plane ${input.controlPlaneUrl}`, `--token ${input.token}`);
  if (input.hasCa) parts.push(`--ca-file ${CONTROL_PLANE_CA_FILE}`);
  if (input.installDir !== null && input.kind !== 'upgrade') parts.push(`--install-dir ${input.installDir}`);
  if (input.kind === 'upgrade') parts.push('--upgrade');
  return parts.join(' ');
}
