// Shared set-up for the control-plane tests: settings, a log-capturing logger, fresh databases.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type pino from 'pino';
import { createLogger } from '../../control-plane/src/logger.js';
import { loadSettings } from '../../control-plane/src/settings.js';
import type { Settings } from '../../control-plane/src/settings.js';

export const ADMIN_TOKEN = `test-admin-token-${'k'.repeat(24)}-${randomBytes(8).toString('hex')}`;

export function testSettings(databaseUrl: string, overrides: Partial<Settings> = {}): Settings {
  // The product's own defaults for everything added since (gateway, nodes, leases, faults).
  const defaults = loadSettings({ ZENOVA_DATABASE_URL: databaseUrl, ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN });
  return {
    gateway: { ...defaults.gateway, listen: { host: '127.0.0.1', port: 0 } },
    nodes: defaults.nodes,
    leases: defaults.leases,
    faults: defaults.faults,
    trustedProxies: defaults.trustedProxies,
    databaseUrl,
    listen: { host: '127.0.0.1', port: 0 },
    adminToken: ADMIN_TOKEN,
    secretEncKey: undefined,
    logLevel: 'info',
    publicUrl: undefined,
    ...overrides,
  };
}

export interface CapturedLogger {
  logger: pino.Logger;
  /** Every line written so far, raw. */
  text(): string;
  lines(): Array<Record<string, unknown>>;
}

/** The real logger factory, writing into memory instead of stdout. */
export function captureLogger(settings: Parameters<typeof createLogger>[0]): CapturedLogger {
  const chunks: string[] = [];
  const logger = createLogger(settings, { write: (s: string) => { chunks.push(s); } });
  const text = (): string => chunks.join('');
  return {
    logger,
    text,
    lines: () => text().split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

/** A new, empty database in the server behind `serverUrl`, dropped at teardown. */
export async function freshDatabase(t: { teardown(fn: () => unknown): void }, serverUrl: string): Promise<string> {
  const name = `zenova_cp_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  t.teardown(async () => {
    // Never rejects: tap skips a test's remaining teardowns after one that does.
    const c = new pg.Client({ connectionString: serverUrl, connectionTimeoutMillis: 5_000 });
    try {
      await c.connect();
      try {
        await c.query(`drop database if exists ${name} with (force)`);
      } finally {
        await c.end();
      }
    } catch (err) {
      process.stderr.write(`dropping test database ${name} failed: ${(err as Error).message}\n`);
      process.exitCode = 1; // the file still fails, without skipping the other teardowns
    }
  });
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** A 127.0.0.1 port with nothing listening on it (the fixture's, below the ephemeral range). */
export { closedPort } from '../fixtures/loopback-server.js';

/**
 * A pool's teardown that cannot hang the file: pool.end() waits for every client it handed out, and
 * one a failed test never released holds it for ever. After `withinMs` every client the pool made is
 * ended and the teardown returns. Call it right after creating the pool (it tracks clients from then).
 */
export function boundedPoolEnd(pool: pg.Pool, withinMs = 10_000): () => Promise<void> {
  const clients = new Set<pg.PoolClient>();
  pool.on('connect', (client) => { clients.add(client); });
  pool.on('remove', (client) => { clients.delete(client); });
  return async () => {
    let timer: NodeJS.Timeout | undefined;
    const ended = pool.end().then(() => true, (err: unknown) => {
      process.stderr.write(`pool.end() failed: ${(err as Error).message}\n`);
      process.exitCode = 1; // the file still fails, without skipping the other teardowns
      return true;
    });
    const timedOut = new Promise<false>((resolve) => { timer = setTimeout(() => resolve(false), withinMs); });
    const done = await Promise.race([ended, timedOut]);
    clearTimeout(timer);
    if (done) return;
    process.stderr.write(`pool.end() did not settle within ${withinMs} ms (a client never released?); ending its ${clients.size} clients\n`);
    // A client never released is a leak the file must still fail for (as the hang made it), only sooner.
    process.exitCode = 1;
    for (const client of clients) {
      // end() marks the client as ending (so the closed socket raises no error), then the socket goes.
      client.end().catch(() => undefined);
      (client as unknown as pg.Client).connection.stream.destroy();
    }
  };
}
