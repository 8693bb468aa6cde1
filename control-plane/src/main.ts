/**
 * zenova-control: the control-plane process. Reads settings, connects to and migrates PostgreSQL,
 * loads the gateway TLS identity and the config-signing key, starts the node gateway (gRPC over
 * TLS), serves the console/API (HTTPS when configured), and shuts down cleanly on SIGINT/SIGTERM.
 * Exit codes: 0 clean stop, 1 start-up failure (database, migrations, gateway identity, listen),
 * 2 bad usage/settings.
 */
import type pg from 'pg';
import type pino from 'pino';
import { buildApp } from './app.js';
import { loadConfigSigningKey } from './config/signing-key.js';
import type { ConfigSigningKey } from './config/signing-key.js';
import { createSecretBox } from './crypto/secret-box.js';
import type { SecretBox } from './crypto/secret-box.js';
import { isDatabaseUnavailable } from './db/connection-errors.js';
import { MigrationError, migrate } from './db/migrate.js';
import { createPool, describeDatabaseTarget } from './db/pool.js';
import { gatewayTarget, loopbackTargetWarning } from './gateway/gateway-target.js';
import { startGatewayServer } from './gateway/server.js';
import type { GatewayServer } from './gateway/server.js';
import { loadGatewayIdentity } from './gateway/tls-identity.js';
import type { GatewayIdentity } from './gateway/tls-identity.js';
import { createLogger, redactDatabaseUrl } from './logger.js';
import { productVersion } from '../../proto/src/product-version.js';
import { unknownOptionMessage } from '../../proto/src/index.js';
import { wordsAfterTopFlagProblem } from '../../proto/src/cli-usage-errors.js';
import { SettingsError, loadSettings, settingsVariables } from './settings.js';
import type { Settings } from './settings.js';
import { ConsoleTlsError, listenConsole, readConsoleTls } from './tls/console-server.js';
import type { ConsoleListener, ConsoleTls } from './tls/console-server.js';

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
    'Runs the Zenova Gateway control plane: console and admin API over HTTPS (or HTTP), and the node',
    'gateway (gRPC over TLS), backed by PostgreSQL. Database migrations are applied at start-up.',
    'Configuration comes from the environment:',
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

function invalidSetting(problem: string): never {
  process.stderr.write(`${PROGRAM}: invalid settings:\n  ${problem}\n`);
  process.exit(2);
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

function installSignalHandlers(consoleListener: ConsoleListener, gateway: GatewayServer, pool: pg.Pool, logger: pino.Logger): void {
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
        // Both stop accepting at once; sessions and requests in flight finish before the pool goes.
        await Promise.all([gateway.close(), consoleListener.close()]);
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

function usageError(problem: string): never {
  process.stderr.write(`${PROGRAM}: ${problem}\n\n${usage()}`);
  process.exit(2);
}

async function main(argv: string[]): Promise<void> {
  const [first, ...words] = argv;
  if (first === '--help' || first === '-h' || first === '--version') {
    // They take no more words: one after them (often a token pasted in the wrong place) is refused
    // saying where it was, never what it was, as zenova and zenova-node refuse it.
    const problem = wordsAfterTopFlagProblem(PROGRAM, first, words, { commands: false });
    if (problem !== undefined) usageError(problem);
    process.stdout.write(first === '--version' ? `${productVersion()}\n` : usage());
    return;
  }
  if (argv.length > 0) {
    // Settings come from the environment only; a stray word may be a pasted secret, so it is not quoted.
    usageError(argv[0]!.startsWith('-') ? unknownOptionMessage(argv[0]!, ['help', 'version']) : `unexpected argument (not shown: it may be a secret); ${PROGRAM} takes no arguments but --help and --version: its settings come from the environment (see --help)`);
  }

  // The gateway's TLS key and the config-signing key are stored encrypted with it: no key, no gateway.
  // (Optional to loadSettings, which the tools that read settings without a gateway share.)
  const noEncKey = 'ZENOVA_SECRET_ENC_KEY: is required: it encrypts the gateway TLS key and the config-signing key stored in PostgreSQL ' +
    '(generate one with openssl rand -base64 32, and back it up with the database)';
  let settings: Settings;
  try {
    settings = loadSettings(process.env);
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    // Every missing setting in one go, this one too.
    const problems = process.env.ZENOVA_SECRET_ENC_KEY === undefined ? [...err.problems, noEncKey] : err.problems;
    process.stderr.write(`${PROGRAM}: invalid settings:\n${problems.map((p) => `  ${p}\n`).join('')}`);
    process.exit(2);
  }
  if (!settings.secretEncKey) invalidSetting(noEncKey);
  let consoleTls: ConsoleTls | undefined;
  if (settings.tls) {
    try {
      consoleTls = readConsoleTls(settings.tls);
    } catch (err) {
      if (!(err instanceof ConsoleTlsError)) throw err;
      invalidSetting(err.message);
    }
  }
  const secretBox = createSecretBox(settings.secretEncKey);

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

  const { identity, signingKey } = await loadKeys(pool, settings, secretBox, logger);
  const signingPublicKeyPem = signingKey.publicKeyPem;

  let gateway: GatewayServer;
  try {
    gateway = await startGatewayServer({ pool, logger, settings, identity, signingKey, secretBox });
  } catch (err) {
    await pool.end().catch(() => undefined);
    logger.fatal({ err }, 'cannot start the node gateway');
    const { host, port } = settings.gateway.listen;
    fail(`cannot start the node gateway on ${host}:${port}: ${err instanceof Error ? err.message : String(err)}`, 1);
  }
  const { target, serverName } = gatewayTarget(settings, gateway.port);
  logger.info({ port: gateway.port, target }, 'node gateway listening');
  const loopbackWarning = loopbackTargetWarning({ target, serverName }, identity.source, settings.gateway);
  if (loopbackWarning !== undefined) logger.warn({ target }, loopbackWarning);

  // caPem '' (external certificate, no trust bundle): nodes pin nothing and use their system trust store.
  const gatewayInfo = { target, serverName, caPem: identity.caPem };
  const app = await buildApp({
    settings,
    pool,
    logger,
    secretBox,
    enrollment: {
      gatewayInfo: async () => gatewayInfo,
      configSigningPublicKeyPem: async () => signingPublicKeyPem,
    },
  });
  let consoleListener: ConsoleListener;
  try {
    consoleListener = await listenConsole(app, settings.listen, consoleTls);
  } catch (err) {
    await gateway.close().catch(() => undefined);
    await pool.end().catch(() => undefined);
    logger.fatal({ err }, 'cannot listen');
    fail(`cannot listen on ${settings.listen.host}:${settings.listen.port}: ${err instanceof Error ? err.message : String(err)}`, 1);
  }
  if (!consoleTls) {
    logger.warn('the console/API is served over plain HTTP: set ZENOVA_TLS_CERT_FILE and ZENOVA_TLS_KEY_FILE to serve HTTPS (nodes enroll over HTTPS only)');
  }
  installSignalHandlers(consoleListener, gateway, pool, logger);
  // Tests and the dev stack wait for this line: it stays the last one of start-up.
  // With ZENOVA_PUBLIC_URL (a reverse proxy in front), the address operators and nodes use is that one.
  const publicUrl = settings.publicUrl;
  logger.info({ url: consoleListener.url, publicUrl, consoleUrl: publicUrl === undefined ? undefined : `${publicUrl}/console/` }, 'control plane listening');
}

/** The gateway identity and the config-signing key; any refusal stops start-up with its own message. */
async function loadKeys(
  pool: pg.Pool, settings: Settings, secretBox: SecretBox, logger: pino.Logger,
): Promise<{ identity: GatewayIdentity; signingKey: ConfigSigningKey }> {
  let step = 'the gateway TLS identity';
  try {
    const identity = await loadGatewayIdentity({ pool, settings, secretBox, logger });
    step = 'the config-signing key';
    const signingKey = await loadConfigSigningKey(pool, secretBox);
    return { identity, signingKey };
  } catch (err) {
    await pool.end().catch(() => undefined);
    logger.fatal({ err }, `cannot load ${step}`);
    // Our own errors (GatewayIdentityError, SecretBoxError, SigningKeyError) carry operator-ready
    // messages; anything else (the database went away) gets the step as context.
    fail(`cannot load ${step}: ${err instanceof Error ? err.message : String(err)}`, 1);
  }
}

main(process.argv.slice(2)).catch((err: unknown) => {
  // Unexpected: a bug rather than a configuration problem, so the stack is worth printing.
  process.stderr.write(`${PROGRAM}: start-up failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
