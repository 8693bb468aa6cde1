// Shared set-up for the config admin API tests: an app with a real secret box on a migrated
// database, an authenticated request helper, and a LISTEN on zenova_config_changed.
import { randomBytes } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import pg from 'pg';
import { buildApp } from '../../control-plane/src/app.js';
import { CONFIG_CHANGED_CHANNEL, parseConfigChangedPayload } from '../../control-plane/src/config/config-changes.js';
import { createSecretBox } from '../../control-plane/src/crypto/secret-box.js';
import type { SecretBox } from '../../control-plane/src/crypto/secret-box.js';
import { createPool } from '../../control-plane/src/db/pool.js';
import { waitFor } from '../fixtures/wait-for.js';
import { runEach } from '../fixtures/teardown-steps.js';
import { captureLogger, testSettings } from './helpers.js';
import type { CapturedLogger } from './helpers.js';
import { bearer, stubEnrollment } from './nodes-harness.js';

interface HasTeardown { teardown(fn: () => unknown): void }

export interface ConfigApp {
  app: FastifyInstance;
  pool: pg.Pool;
  log: CapturedLogger;
  secretBox: SecretBox | undefined;
  /** An admin-authenticated request; `payload` is sent as JSON (a string as a raw JSON body). */
  call: (method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE', url: string, payload?: unknown) => Promise<LightMyRequestResponse>;
  /** GET /api/v1/config/version. */
  version: () => Promise<number>;
}

/** The app on its own pool with a captured logger; `secretBox: false` leaves the secret box out. */
export async function configApp(t: HasTeardown, url: string, opts: { secretBox?: boolean } = {}): Promise<ConfigApp> {
  const settings = testSettings(url);
  const log = captureLogger(settings);
  const pool = createPool({ databaseUrl: url, logger: log.logger });
  const secretBox = opts.secretBox === false ? undefined : createSecretBox(randomBytes(32));
  const app = await buildApp({ settings, pool, logger: log.logger, enrollment: stubEnrollment, secretBox });
  t.teardown(() => runEach('the config app', () => app.close(), () => pool.end()));
  const call: ConfigApp['call'] = (method, path, payload) => {
    if (payload === undefined) return app.inject({ method, url: path, headers: bearer });
    // A string is sent as a raw JSON body (to test malformed JSON); anything else is serialised.
    if (typeof payload === 'string') {
      return app.inject({ method, url: path, headers: { ...bearer, 'content-type': 'application/json' }, payload });
    }
    return app.inject({ method, url: path, headers: bearer, payload: payload as object });
  };
  const version = async (): Promise<number> => {
    const res = await call('GET', '/api/v1/config/version');
    if (res.statusCode !== 200) throw new Error(`config version: ${res.statusCode} ${res.body}`);
    return res.json<{ version: number }>().version;
  };
  return { app, pool, log, secretBox, call, version };
}

export interface ConfigChangeListener {
  /** Every version notified so far, in arrival order. */
  versions: number[];
  /** Resolves once `version` has been notified. */
  heard: (version: number) => Promise<void>;
}

/** A dedicated LISTEN connection on zenova_config_changed. */
export async function listenConfigChanges(t: HasTeardown, url: string): Promise<ConfigChangeListener> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  t.teardown(() => client.end());
  const versions: number[] = [];
  client.on('notification', (msg) => {
    if (msg.channel !== CONFIG_CHANGED_CHANNEL) return;
    const version = parseConfigChangedPayload(msg.payload);
    if (version !== undefined) versions.push(version);
  });
  await client.query(`listen ${CONFIG_CHANGED_CHANNEL}`);
  return {
    versions,
    heard: async (version) => {
      await waitFor(() => versions.includes(version), { what: `NOTIFY ${CONFIG_CHANGED_CHANNEL} '${version}'` });
    },
  };
}

let counter = 0;
/** A config name no other test in this process used. */
export function uniqueConfigName(prefix: string): string {
  counter += 1;
  return `${prefix}-${process.pid % 1000}-${counter}`;
}

/** Fails with the body when the status is not the expected one; returns the parsed JSON. */
/** `app.inject` as the admin, with an `If-Match` header when one is given (the If-Match tests). */
export function sendIfMatch(app: FastifyInstance) {
  return (method: 'GET' | 'PUT' | 'PATCH' | 'DELETE', url: string, body?: unknown, ifMatch?: string): Promise<LightMyRequestResponse> => {
    const headers: Record<string, string> = { ...bearer, ...(ifMatch === undefined ? {} : { 'if-match': ifMatch }) };
    return app.inject({ method, url, headers, ...(body === undefined ? {} : { payload: body as object }) });
  };
}

/** A reply's ETag; throws when it has none. */
export function etagOf(res: LightMyRequestResponse): string {
  const etag = res.headers.etag;
  if (typeof etag !== 'string') throw new Error(`no ETag on ${res.statusCode} ${res.body.slice(0, 200)}`);
  return etag;
}

export function expectStatus<T>(res: LightMyRequestResponse, status: number): T {
  if (res.statusCode !== status) throw new Error(`expected ${status}, got ${res.statusCode}: ${res.body}`);
  return res.json<T>();
}

/** Every page of a keyset-paged list at `url` (which has a query), following nextCursor until it is null. */
export async function walkPages<P extends { nextCursor: string | null }>(call: ConfigApp['call'], url: string, maxPages = 10_000): Promise<P[]> {
  const pages: P[] = [];
  for (let cursor: string | null = null; pages.length < maxPages;) {
    const res = await call('GET', cursor === null ? url : `${url}&cursor=${encodeURIComponent(cursor)}`);
    if (res.statusCode !== 200) throw new Error(`${url} page ${pages.length}: ${res.statusCode} ${res.body.slice(0, 300)}`);
    const page = res.json<P>();
    pages.push(page);
    cursor = page.nextCursor;
    if (cursor === null) return pages;
  }
  throw new Error(`${url}: more than ${maxPages} pages`);
}
