/**
 * Which PostgreSQL the dev stack runs on. ZENOVA_DATABASE_URL means "use this server instead of the
 * embedded one", but the stack itself writes its embedded cluster's URL to `.zenova/dev.env` under
 * that name, and the README has users source dev.env into their shell. That URL, seen again on the
 * next `npm start`, must start the embedded cluster, or the control plane finds nothing listening.
 */

/** The embedded cluster's superuser and the database the stack uses in it. */
export const EMBEDDED_DB_USER = 'zenova';
const EMBEDDED_DB_NAME = 'postgres';
const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

export type DatabaseChoice = { kind: 'embedded' } | { kind: 'external'; url: string };

export function embeddedDatabaseUrl(password: string, port: number): string {
  return `postgres://${EMBEDDED_DB_USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/${EMBEDDED_DB_NAME}`;
}

/**
 * True when `value` is a URL of this home's embedded cluster: its user and database on a loopback
 * host with the password from the dev state (random per home, so no other server has it). The port
 * is not compared: a port that was taken moves to a free one, and dev.env still names the old one.
 */
export function isEmbeddedDatabaseUrl(value: string, databasePassword: string): boolean {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return false;
  }
  let password: string;
  try {
    password = decodeURIComponent(url.password);
  } catch {
    return false;
  }
  return (url.protocol === 'postgres:' || url.protocol === 'postgresql:')
    && url.username === EMBEDDED_DB_USER
    && password === databasePassword
    && LOOPBACK_HOSTS.has(url.hostname)
    && url.pathname === `/${EMBEDDED_DB_NAME}`
    && url.search === ''
    && url.hash === '';
}

/** `envUrl` is ZENOVA_DATABASE_URL as the stack was started with it (empty counts as unset). */
export function chooseDatabase(envUrl: string | undefined, databasePassword: string): DatabaseChoice {
  if (!envUrl || isEmbeddedDatabaseUrl(envUrl, databasePassword)) return { kind: 'embedded' };
  return { kind: 'external', url: envUrl };
}
