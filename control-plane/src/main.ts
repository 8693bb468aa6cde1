/**
 * zenova-control: the control-plane process. Reads settings, connects to and migrates PostgreSQL,
 * serves the console/API, and shuts down cleanly on SIGINT/SIGTERM.
 * Exit codes: 0 clean stop, 1 start-up failure (database, migrations, listen), 2 bad usage/settings.
 */
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import type pino from 'pino';
import { buildApp } from './app.js';
import { isDatabaseUnavailable } from './db/connection-errors.js';
import { MigrationError, migrate } from './db/migrate.js';
import { createPool, describeDatabaseTarget } from './db/pool.js';
import { createLogger, redactDatabaseUrl } from './logger.js';
import { productVersion } from './product-version.js';
import { SettingsError, loadSettings, settingsVariables } from './settings.js';
import type { Settings } from './settings.js';

const PROGRAM = 'zenova-control';
// Past this, a stuck shutdown (a hung connection) gives way to a forced exit.
const SHUTDOWN_DEADLINE_MS = 10_000;

function usage(): string {
  const width = Math.max(...settingsVariables.map((v) => v.name.length));
  const variables = settingsVariables
    .map((v) => `  ${v.name.padEnd(width)}  ${v.required ? '(required) ' : ''}${v.description}`)
    .join('\n');
  return [
    `Usage: ${PROGRAM} [--help] [--version]`,
    '',
    'Runs the Zenova Gateway control plane: console and admin API over HTTP, backed by PostgreSQL.',
    'Database migrations are applied at start-up. Configuration comes from the environment:',
    '',
    variables,
    '',
    'Exit codes: 0 stopped by SIGINT/SIGTERM, 1 start-up failed, 2 bad arguments or settings.',
    '',
  ].join('\n');
}

function fail(message: string, code: number): never {
  process.stderr.write(`${PROGRAM}: ${message}\n`);
  process.exit(code);
}

function urlFor(address: AddressInfo): string {
  const host = address.family === 'IPv6' || address.address.includes(':') ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}

async function connectDatabase(settings: Settings, logger: pino.Logger): Promise<pg.Pool> {
  const pool = createPool({ databaseUrl: settings.databaseUrl, logger });
  const target = describeDatabaseTarget(settings.databaseUrl);
  logger.info({ database: redactDatabaseUrl(settings.databaseUrl) }, 'connecting to the database');
  try {
    await pool.query('select 1');
  } catch (err) {
    await pool.end().catch(() => undefined);
    const reason = err instanceof Error ? err.message : String(err);
    logger.fatal({ err, database: target }, 'cannot reach the database');
    fail(`cannot reach the database at ${target}: ${reason}${isDatabaseUnavailable(err) ? '' : ' (check the URL, user and password)'}`, 1);
  }
  return pool;
}

function installSignalHandlers(app: FastifyInstance, pool: pg.Pool, logger: pino.Logger): void {
  let stopping = false;
  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) {
      logger.warn({ signal }, 'second signal during shutdown; exiting now');
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal }, 'shutting down');
    setTimeout(() => {
      logger.error('shutdown did not finish in time; exiting');
      process.exit(1);
    }, SHUTDOWN_DEADLINE_MS).unref();
    void (async () => {
      try {
        await app.close();
        await pool.end();
        logger.info('control plane stopped');
        process.exit(0);
      } catch (err) {
        logger.error({ err }, 'error during shutdown');
        process.exit(1);
      }
    })();
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

async function main(argv: string[]): Promise<void> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(usage());
    return;
  }
  if (argv.includes('--version')) {
    process.stdout.write(`${productVersion()}\n`);
    return;
  }
  if (argv.length > 0) {
    process.stderr.write(`${PROGRAM}: unknown argument '${argv[0]}'\n\n${usage()}`);
    process.exit(2);
  }

  let settings: Settings;
  try {
    settings = loadSettings(process.env);
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    process.stderr.write(`${PROGRAM}: invalid settings:\n${err.problems.map((p) => `  ${p}\n`).join('')}`);
    process.exit(2);
  }

  const logger = createLogger(settings);
  logger.info({ version: productVersion() }, 'control plane starting');
  const pool = await connectDatabase(settings, logger);

  try {
    await migrate(pool, { logger });
  } catch (err) {
    await pool.end().catch(() => undefined);
    logger.fatal({ err }, 'database migration failed');
    const prefix = err instanceof MigrationError ? 'database migration refused' : 'database migration failed';
    fail(`${prefix}: ${err instanceof Error ? err.message : String(err)}`, 1);
  }

  const app = await buildApp({ settings, pool, logger });
  try {
    await app.listen({ host: settings.listen.host, port: settings.listen.port });
  } catch (err) {
    await pool.end().catch(() => undefined);
    logger.fatal({ err }, 'cannot listen');
    fail(`cannot listen on ${settings.listen.host}:${settings.listen.port}: ${err instanceof Error ? err.message : String(err)}`, 1);
  }
  installSignalHandlers(app, pool, logger);
  logger.info({ url: urlFor(app.server.address() as AddressInfo) }, 'control plane listening');
}

main(process.argv.slice(2)).catch((err: unknown) => {
  // Unexpected: a bug rather than a configuration problem, so the stack is worth printing.
  process.stderr.write(`${PROGRAM}: start-up failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
