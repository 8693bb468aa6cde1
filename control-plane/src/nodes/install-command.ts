/**
 * The one-line command an operator runs on the node host, in the form of seed 004 §9.4/§9.6
 * (`sudo ./zenova install node …`), so it is copied whole, except that the token is piped in
 * rather than given as `--token T`: `printf '%s\n' T | sudo ./zenova install node … --token-file -`.
 * `printf` is the shell's own (bash, dash, zsh), so the token is in no process's arguments, which
 * every local user can read (`ps`, /proc/PID/cmdline) while the installer runs; the installer reads
 * it from its standard input. Every part comes from validated input (URL and install dir restricted
 * to plain URL and path characters, base64url tokens), and a value with a character a shell would
 * read is single-quoted, so the line can be pasted into a shell as it is.
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

/** Characters no shell (bash, zsh, dash) reads in the middle of a word. */
const SHELL_PLAIN_WORD = /^[A-Za-z0-9._/:%@+,-]+$/;

/**
 * The value as one shell word: as it is when plain, else single-quoted. `[::1]` unquoted is a glob:
 * bash with failglob and zsh refuse the line, and a file matching it would replace the URL.
 */
function shellWord(value: string): string {
  return SHELL_PLAIN_WORD.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`;
}

/** What the token is given to the installer with, in place of the seed's `--token T`: its standard input. */
const TOKEN_FROM_STDIN = '--token-file -';

export function installCommand(input: InstallCommandInput): string {
  // The token on the installer's standard input, from the shell's builtin printf: never in argv.
  // Then, as the seed writes it: root, and the `zenova` unpacked from the installer tarball in the
  // current dir (the operator runs it there, beside zenova-node.zpkg; no `zenova` is on PATH yet).
  const parts = [`printf '%s\\n' ${shellWord(input.token)} |`, 'sudo ./zenova install node', `--package ${NODE_PACKAGE_FILE}`];
  // §9.6 puts --reenroll before --control-plane and --upgrade last; the token option stands where
  // the seed's --token does.
  if (input.kind === 'reenroll') parts.push('--reenroll');
  parts.push(`--control-plane ${shellWord(input.controlPlaneUrl)}`, TOKEN_FROM_STDIN);
  if (input.hasCa) parts.push(`--ca-file ${CONTROL_PLANE_CA_FILE}`);
  if (input.installDir !== null && input.kind !== 'upgrade') parts.push(`--install-dir ${shellWord(input.installDir)}`);
  if (input.kind === 'upgrade') parts.push('--upgrade');
  return parts.join(' ');
}

/** What the check command is made of: the install command's settings, never its token. */
export type CheckCommandInput = Omit<InstallCommandInput, 'token'>;

/**
 * The pre-check of seed 004 §9.4 step 1 for the command of `input.kind`: the same `sudo ./zenova
 * install node` with the same package, control-plane URL, `--ca-file` and `--install-dir` (so a
 * private CA is no NODE-CP-TLS and the dir checked is the one the install writes), and `--check-only`
 * in place of the token: it reads no token (no `--token`, no `--token-file`, nothing piped in),
 * writes nothing and can be run any number of times. The installer takes `--check-only` with
 * `--reenroll` or `--upgrade` as that command's dry run, so a re-enroll or upgrade command's check
 * keeps that flag, where the installer's own check-again advice puts it.
 */
export function checkCommand(input: CheckCommandInput): string {
  const parts = ['sudo ./zenova install node', `--package ${NODE_PACKAGE_FILE}`];
  if (input.kind === 'reenroll') parts.push('--reenroll');
  parts.push(`--control-plane ${shellWord(input.controlPlaneUrl)}`);
  if (input.hasCa) parts.push(`--ca-file ${CONTROL_PLANE_CA_FILE}`);
  if (input.installDir !== null && input.kind !== 'upgrade') parts.push(`--install-dir ${shellWord(input.installDir)}`);
  if (input.kind === 'upgrade') parts.push('--upgrade');
  parts.push('--check-only');
  return parts.join(' ');
}
