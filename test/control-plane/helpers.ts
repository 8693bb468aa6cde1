// Shared set-up for the control-plane tests: settings, a log-capturing logger, fresh databases.
import { randomBytes } from 'node:crypto';
import net from 'node:net';
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
    const c = new pg.Client({ connectionString: serverUrl });
    await c.connect();
    try {
      await c.query(`drop database if exists ${name} with (force)`);
    } finally {
      await c.end();
    }
  });
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** A 127.0.0.1 port with nothing listening on it (bound once by us, then released). */
export async function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
