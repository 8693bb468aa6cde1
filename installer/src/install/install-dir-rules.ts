/**
 * The install-dir rules of seed 004 §9.2, as the installer enforces them before any write. The
 * control plane checks the same rules when a node is created (control-plane/src/nodes/
 * node-validation.ts); the forbidden roots are one list both take from proto/src/install-dir-rules.ts,
 * and test/installer/install-dir-rules.test.ts keeps the other rules in agreement.
 */
import type { DiagnosticCode } from './diagnostics.js';
import { forbiddenInstallRootRule } from '../../../proto/src/install-dir-rules.js';

export const DEFAULT_INSTALL_DIR = '/opt/zenova-node';
/** The central (control-plane host) install; a node dir may neither be in it nor contain it. */
export const CENTRAL_INSTALL_DIR = '/opt/zenova';
const MAX_INSTALL_DIR_CHARS = 255;

export interface InstallDirProblem {
  code: DiagnosticCode;
  rule: string;
}

const isWithin = (dir: string, root: string): boolean => dir === root || dir.startsWith(`${root}/`);

/** `/opt/zenova-node/` → `/opt/zenova-node`. */
export function normaliseInstallDir(value: string): string {
  const trimmed = value.replace(/\/+$/, '');
  return trimmed === '' ? '/' : trimmed;
}

/** The §9.2 rule `value` breaks, or undefined when it is a valid install dir. */
export function installDirProblem(value: string): InstallDirProblem | undefined {
  const format = (rule: string): InstallDirProblem => ({ code: 'NODE-DIR-FORMAT', rule });
  if (value.length > MAX_INSTALL_DIR_CHARS) return format(`must be at most ${MAX_INSTALL_DIR_CHARS} characters`);
  if (!value.startsWith('/')) return format('must be an absolute path (start with /)');
  if (!/^[A-Za-z0-9._/-]+$/.test(value)) return format("may contain only letters, digits, '.', '_', '-' and '/'");
  const dir = normaliseInstallDir(value);
  const segments = dir === '/' ? [] : dir.split('/').slice(1);
  if (segments.some((s) => s === '')) return format("must not contain empty path segments ('//')");
  if (segments.some((s) => s === '.' || s === '..')) return format("must not contain '.' or '..' segments");
  if (segments.length < 2) return format('must be at least two levels deep (e.g. /data/zenova-node)');
  return installDirLocationProblem(dir);
}

/**
 * The §9.2 rules on where a (normalised, absolute) dir lies: not in or around the central install,
 * not under a forbidden root. Also applied to where an install dir's symbolic links lead.
 */
export function installDirLocationProblem(dir: string): InstallDirProblem | undefined {
  if (isWithin(dir, CENTRAL_INSTALL_DIR) || isWithin(CENTRAL_INSTALL_DIR, dir)) {
    return { code: 'NODE-DIR-CENTRAL', rule: `must not be inside or overlap the central install ${CENTRAL_INSTALL_DIR}` };
  }
  const forbidden = forbiddenInstallRootRule(dir);
  return forbidden === undefined ? undefined : { code: 'NODE-DIR-FORBIDDEN', rule: forbidden };
}
