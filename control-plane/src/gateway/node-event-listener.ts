/**
 * Hears node events (deleted, credentials revoked) and config changes from every control-plane
 * replica: a dedicated PostgreSQL connection LISTENing on zenova_node_events and
 * zenova_config_changed (and zenova_credit_changed). A LISTEN lives on one connection, so it cannot share the pool. When the connection drops it is re-opened with exponential back-off and
 * jitter, and `onReconnect` runs so the caller can re-check what it may have missed meanwhile.
 *
 * A connection can also go silent without ending (a hung server, a failover, a NAT or firewall
 * dropping the flow): a deaf LISTEN looks exactly like a quiet one. So the connection is probed
 * (`select 1`, bounded on the client side) every probeIntervalMs; a probe that fails or gets no
 * answer within probeTimeoutMs counts as a drop. A silent drop is therefore noticed within
 * probeIntervalMs + probeTimeoutMs (15 s by default) and followed by the same re-open and onReconnect.
 */
import pg from 'pg';
import type pino from 'pino';
import { CREDIT_CHANGED_CHANNEL } from '../billing/credit-changes.js';
import { CONFIG_CHANGED_CHANNEL, parseConfigChangedPayload } from '../config/config-changes.js';
import { NODE_EVENTS_CHANNEL, parseNodeEvent, type NodeEvent } from '../nodes/node-events.js';

export interface NodeEventListenerOptions {
  databaseUrl: string;
  logger: pino.Logger;
  onEvent(event: NodeEvent): void;
  /** A config change committed; `version` is the new config version. Not listened for when absent. */
  onConfigChanged?(version: number): void;
  /** An account's credit was topped up. Not listened for when absent. */
  onCreditChanged?(): void;
  /** After a dropped connection was re-opened: events sent while it was down were lost. */
  onReconnect(): void;
  /** Back-off bounds; defaults suit production. */
  minRetryMs?: number;
  maxRetryMs?: number;
  /** Liveness probe period and its client-side bound; defaults suit production (10 s and 5 s). */
  probeIntervalMs?: number;
  probeTimeoutMs?: number;
}

export interface NodeEventListener {
  close(): Promise<void>;
}

const APPLICATION_NAME = 'zenova-control-node-events';
const CONNECT_TIMEOUT_MS = 5_000;
const DEFAULT_MIN_RETRY_MS = 250;
const DEFAULT_MAX_RETRY_MS = 10_000;
const DEFAULT_PROBE_INTERVAL_MS = 10_000;
const DEFAULT_PROBE_TIMEOUT_MS = 5_000;
// TCP keepalive probes start after this long idle (the OS default is 2 hours).
const KEEPALIVE_INITIAL_DELAY_MS = 10_000;

/** Opens the listening connection; rejects when the first attempt fails (start-up should fail loudly). */
export async function startNodeEventListener(opts: NodeEventListenerOptions): Promise<NodeEventListener> {
  const log = opts.logger.child({ component: 'node-events' });
  const minRetryMs = opts.minRetryMs ?? DEFAULT_MIN_RETRY_MS;
  const maxRetryMs = opts.maxRetryMs ?? DEFAULT_MAX_RETRY_MS;
  const probeIntervalMs = opts.probeIntervalMs ?? DEFAULT_PROBE_INTERVAL_MS;
  const probeTimeoutMs = opts.probeTimeoutMs ?? DEFAULT_PROBE_TIMEOUT_MS;
  let closed = false;
  let client: pg.Client | undefined;
  let retryTimer: NodeJS.Timeout | undefined;
  let failures = 0;

  const onNotification = (message: pg.Notification): void => {
    if (message.channel === CREDIT_CHANGED_CHANNEL) {
      opts.onCreditChanged?.();
      return;
    }
    if (message.channel === CONFIG_CHANGED_CHANNEL && opts.onConfigChanged !== undefined) {
      const version = parseConfigChangedPayload(message.payload);
      if (version === undefined) {
        log.warn({ payloadLength: message.payload?.length ?? 0 }, 'ignoring a config-change notification that is not understood');
        return;
      }
      log.debug({ version }, 'config change heard');
      opts.onConfigChanged(version);
      return;
    }
    if (message.channel !== NODE_EVENTS_CHANNEL) return;
    const event = parseNodeEvent(message.payload);
    if (event === undefined) {
      log.warn({ payloadLength: message.payload?.length ?? 0 }, 'ignoring a node event that is not understood');
      return;
    }
    log.info({ event: event.type, nodeId: event.nodeId }, 'node event received');
    opts.onEvent(event);
  };

  async function connect(): Promise<pg.Client> {
    const next = new pg.Client({
      connectionString: opts.databaseUrl,
      application_name: APPLICATION_NAME,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      // A half-open connection (NAT or failover) would otherwise go silently deaf.
      keepAlive: true,
      keepAliveInitialDelayMillis: KEEPALIVE_INITIAL_DELAY_MS,
    });
    // Registered before connect: an error with no listener would crash the process. Until the
    // LISTEN is in place a failure belongs to the attempt (it throws), not to the drop handling.
    let live = false;
    let dropped = false;
    let probeTimer: NodeJS.Timeout | undefined;
    const onDrop = (err?: Error): void => {
      if (!live || dropped) return;
      dropped = true;
      clearTimeout(probeTimer);
      if (client === next) client = undefined;
      next.removeListener('notification', onNotification);
      // A silent connection's probe is still active: pg's end() then destroys the socket.
      void next.end().catch(() => undefined);
      if (closed) return;
      log.warn({ err }, 'lost the node-event connection; reconnecting');
      scheduleReconnect();
    };
    next.on('error', onDrop);
    next.on('end', () => onDrop());
    try {
      await next.connect();
      next.on('notification', onNotification);
      await next.query(`LISTEN ${NODE_EVENTS_CHANNEL}`);
      if (opts.onConfigChanged !== undefined) await next.query(`LISTEN ${CONFIG_CHANGED_CHANNEL}`);
      if (opts.onCreditChanged !== undefined) await next.query(`LISTEN ${CREDIT_CHANGED_CHANNEL}`);
    } catch (err) {
      await next.end().catch(() => undefined);
      throw err;
    }
    live = true;
    const probe = (): void => {
      probeTimer = setTimeout(() => {
        if (dropped || closed) return;
        next.query({ text: 'select 1', query_timeout: probeTimeoutMs } as pg.QueryConfig).then(
          () => { if (!dropped && !closed) probe(); },
          (err: unknown) => onDrop(err instanceof Error ? err : new Error(String(err))),
        );
      }, probeIntervalMs);
      probeTimer.unref();
    };
    probe();
    return next;
  }

  function scheduleReconnect(): void {
    if (closed || retryTimer !== undefined) return;
    const ceiling = Math.min(maxRetryMs, minRetryMs * 2 ** Math.min(failures, 16));
    // Full jitter in the upper half: replicas that lost the database together do not return together.
    const delay = ceiling / 2 + Math.random() * (ceiling / 2);
    failures += 1;
    retryTimer = setTimeout(() => {
      retryTimer = undefined;
      void reconnect();
    }, delay);
    retryTimer.unref();
  }

  async function reconnect(): Promise<void> {
    if (closed) return;
    try {
      const next = await connect();
      if (closed) {
        await next.end().catch(() => undefined);
        return;
      }
      client = next;
      failures = 0;
      log.info('node-event connection re-opened');
      opts.onReconnect();
    } catch (err) {
      log.warn({ err }, 'cannot re-open the node-event connection; retrying');
      scheduleReconnect();
    }
  }

  client = await connect();
  log.debug('listening for node events');

  return {
    async close() {
      closed = true;
      clearTimeout(retryTimer);
      const current = client;
      client = undefined;
      await current?.end().catch(() => undefined);
    },
  };
}
