/**
 * The environment of the dev stack's node child. The stack runs from a shell that may have sourced
 * `.zenova/dev.env` (the admin token, the database URL) or hold the control plane's own settings;
 * the node reads none of them, so none of them reach it: a node process carries no control-plane
 * secret, as on a real node host.
 */
import { settingsVariables } from '../settings.js';

/** What the dev stack writes to `.zenova/dev.env`, in that order. */
export const DEV_ENV_VARIABLES = [
  'ZENOVA_BASE_URL',
  'ZENOVA_API_KEY',
  'ZENOVA_CONSOLE_URL',
  'ZENOVA_CONTROL_PLANE_URL',
  'ZENOVA_ADMIN_TOKEN',
  'ZENOVA_DATABASE_URL',
  'ZENOVA_CA_FILE',
] as const;

const WITHHELD = new Set<string>([
  ...settingsVariables.map((v) => v.name),
  ...DEV_ENV_VARIABLES,
  'ZENOVA_TEST_DATABASE_URL',
]);

/** libpq's variables (PGPASSWORD, PGPASSFILE, …): database credentials the node has no use for. */
const LIBPQ_VARIABLE = /^PG[A-Z]+$/;

/** `env` without the control plane's settings, dev.env's variables and database credentials. */
export function nodeChildEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([name]) => !WITHHELD.has(name) && !LIBPQ_VARIABLE.test(name)));
}
