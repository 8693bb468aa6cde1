/**
 * The control plane's PostgreSQL pool. Limits are chosen so a slow or unreachable database shows up
 * as a prompt error (and a 503) rather than requests piling up behind it: a slow statement is
 * cancelled by the server (statement_timeout), and a connection that went silent — the server hung,
 * or a failover, NAT or firewall dropped it without a reset — fails its query on the client side
 * (query_timeout) and is cut, so the next query gets a fresh connection.
 */
import pg from 'pg';
import type pino from 'pino';
import { ambiguousDatabaseUrlReason } from './ambiguous-database-url.js';
import { endOnQueryTimeout } from './query-timeout.js';

export interface PoolOptions {
  databaseUrl: string;
  logger?: pino.Logger;
  /** Shown in pg_stat_activity, so DBAs can tell our sessions apart. */
  applicationName?: string;
  max?: number;
  statementTimeoutMs?: number;
  /** The client-side bound on every query; default: statementTimeoutMs + POOL_DEFAULTS.queryTimeoutMarginMs (35 s). */
  queryTimeoutMs?: number;
  connectionTimeoutMs?: number;
}

export const POOL_DEFAULTS = {
  applicationName: 'zenova-control',
  // Several replicas share one server (default max_connections is 100).
  max: 10,
  idleTimeoutMs: 30_000,
  connectionTimeoutMs: 5_000,
  statementTimeoutMs: 30_000,
  // Above the statement timeout, so a slow statement is the server's clean cancellation (the
  // connection kept); only a silent connection runs into the client's bound.
  queryTimeoutMarginMs: 5_000,
  // TCP keepalive probes start after this long idle (the OS default is 2 hours).
  keepAliveInitialDelayMs: 10_000,
  // A transaction left open by a bug must not hold locks forever.
  idleInTransactionTimeoutMs: 60_000,
} as const;

export function createPool(options: PoolOptions): pg.Pool {
  const statementTimeoutMs = options.statementTimeoutMs ?? POOL_DEFAULTS.statementTimeoutMs;
  const pool = new pg.Pool({
    connectionString: options.databaseUrl,
    application_name: options.applicationName ?? POOL_DEFAULTS.applicationName,
    max: options.max ?? POOL_DEFAULTS.max,
    idleTimeoutMillis: POOL_DEFAULTS.idleTimeoutMs,
    connectionTimeoutMillis: options.connectionTimeoutMs ?? POOL_DEFAULTS.connectionTimeoutMs,
    statement_timeout: statementTimeoutMs,
    query_timeout: options.queryTimeoutMs ?? statementTimeoutMs + POOL_DEFAULTS.queryTimeoutMarginMs,
    idle_in_transaction_session_timeout: POOL_DEFAULTS.idleInTransactionTimeoutMs,
    // Detects half-open connections (a NAT or failover dropped them) instead of hanging on them.
    keepAlive: true,
    keepAliveInitialDelayMillis: POOL_DEFAULTS.keepAliveInitialDelayMs,
  });
  // An idle client losing its connection (server restart, failover) emits 'error' on the pool;
  // unhandled, that would crash the process. The pool drops the client and reconnects on demand.
  pool.on('error', (err) => {
    options.logger?.warn({ err }, 'idle database connection failed; it will be replaced');
  });
  // A checked-out client has no pool listener: one whose connection ends between two statements
  // of a transaction (a server restart, pg_terminate_backend) emitted an unhandled 'error' and
  // crashed the process. With this one the error is logged, the next query on the client rejects
  // ("Connection terminated"), and the caller's usual failure path releases it broken.
  pool.on('connect', (client) => {
    client.on('error', (err) => {
      options.logger?.warn({ err }, 'a database connection in use failed; its work fails and it will be replaced');
    });
    endOnQueryTimeout(client, (err) => {
      options.logger?.warn({ err }, 'a database connection went silent; its query failed and the connection is closed');
    });
  });
  return pool;
}

/** "HOST:PORT/DB as USER" for messages about the connection; never contains the password. */
export function describeDatabaseTarget(databaseUrl: string): string {
  try {
    const url = new URL(databaseUrl);
    // Host, port and path of such a URL may be pieces of the password: show none of them.
    if (ambiguousDatabaseUrlReason(url) !== undefined) return '(a database URL that cannot be read unambiguously)';
    const name = decodeURIComponent(url.pathname.replace(/^\//, ''));
    // A name with '@' or '/' is more likely a password cut short than a database.
    const database = /[@/]/.test(name) ? '(database name not shown)' : name || '(default database)';
    const user = url.username ? ` as ${decodeURIComponent(url.username)}` : '';
    return `${url.hostname}:${url.port || '5432'}/${database}${user}`;
  } catch {
    return '(unparseable database URL)';
  }
}
