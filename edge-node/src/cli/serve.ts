// `zenova-node serve`: load the config (a local file, or the verified bundle cache of an enrolled
// node), listen, keep the control link up and apply pushed bundles (when enrolled), and shut down
// cleanly on SIGINT/SIGTERM.
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../app.js';
import type { ConfigApplier } from '../config/apply-bundle.js';
import { ConfigHolder } from '../config/config-holder.js';
import { configStatus, loadEnrolledConfig } from '../config/enrolled-config.js';
import { LocalConfigError, loadLocalConfig } from '../config/local-config.js';
import { fromLocalConfig } from '../config/runtime-config.js';
import { startConnectLoop } from '../control/connect-loop.js';
import { startControlLinkLeader } from '../control/control-link-leader.js';
import { ControlPlaneTime } from '../control/control-plane-time.js';
import { loadControlStatus } from '../control/control-status.js';
import type { ControlLinkLeader } from '../control/control-link-leader.js';
import type { ConnectLoop } from '../control/connect-loop.js';
import type { Logger } from '../logger.js';
import { RequestWindow } from '../metrics/request-window.js';
import { productVersion } from '../../../proto/src/product-version.js';
import { loadCredentials } from '../state/credential-store.js';
import { loadIdentity } from '../state/identity.js';
import type { NodeIdentity } from '../state/identity.js';
import { checkWritable, openStateStore } from '../state/state-store.js';
import { reenrollAdvice } from '../status/node-status.js';
import { notifyReady, notifyStopping } from '../service/sd-notify.js';
import { isLoopbackHost } from '../metrics/admin-server.js';
import { expiryWarning, readCallerTls, reloadCallerTls } from '../tls/caller-tls.js';
import type { CallerTlsFiles, CallerTlsPair } from '../tls/caller-tls.js';
import { openNodeServices } from './node-services.js';
import { replicaWorker } from './replica-worker.js';
import { readiness } from '../http/readiness.routes.js';
import { answerReadinessOverIpc, answerWindowOverIpc } from '../metrics/replica-admin.js';
import { PeerWindows, addFigures } from '../metrics/peer-windows.js';
import { readServeSettings } from './serve-settings.js';
import type { NodeServices } from './node-services.js';
import type { RequestSpool } from '../spool/request-spool.js';
import type { StateStore } from '../state/state-store.js';
import type { ListenAddress } from './args.js';

/** How long in-flight requests (long streams included) may run on after a stop signal (ZENOVA_NODE_SHUTDOWN_DRAIN_MS). */
export const SHUTDOWN_DEADLINE_MS = 10_000;
/**
 * After the drain deadline (or a second signal), how long the requests still running have to
 * answer ZN_ERR_NODE_STOPPING and be recorded before their connections are closed.
 */
const STOPPING_ANSWER_GRACE_MS = 2_000;

export interface ServeOptions {
  /** A local config file: a stand-alone node (no control plane). Exclusive with `stateDir`. */
  configFile?: string;
  /** An enrolled state dir: config comes from the control plane (and its cache in the state dir). */
  stateDir?: string;
  listen: ListenAddress;
  logger: Logger;
  shutdownDeadlineMs?: number;
  /** The node settings (serve-settings.ts) are read from here (process.env by default). */
  env?: NodeJS.ProcessEnv;
  /** The admin port (metrics); loopback only. undefined = not started. */
  adminListen?: ListenAddress;
  /** Serve callers over HTTPS with this certificate and key (read at start and on SIGHUP); plain HTTP when absent. */
  tls?: CallerTlsFiles;
}

/** The state dir has no identity or credential; the message says to enroll. */
export class NotEnrolledError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NotEnrolledError';
  }
}

/**
 * The stop's end (its deadline, or "now"): the requests still running are ended with
 * ZN_ERR_NODE_STOPPING, and once they answered (or `graceMs` passed) the connections left are
 * closed. An answer still waiting then for its record's commit (a full disk) never reaches its
 * caller: its record, still queued, is stamped so at once (run-pipeline.ts), before a commit that
 * space returning (the spool's retry, its close) lets through could record it delivered and charge it.
 */
export async function endRunningRequests(app: FastifyInstance, spool: RequestSpool, graceMs: number): Promise<void> {
  await app.inFlight.stopAll(graceMs);
  app.server.closeAllConnections();
  spool.stampUndelivered?.();
}

/** `http(s)://HOST:PORT` with IPv6 hosts bracketed. */
export function listenUrl(host: string, port: number, scheme: 'http' | 'https' = 'http'): string {
  return `${scheme}://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** Reads the caller port's pair at start (CallerTlsError before anything opens) and logs a near expiry. */
function loadCallerTls(files: CallerTlsFiles, logger: Logger): CallerTlsPair {
  const pair = readCallerTls(files);
  const warning = expiryWarning(pair, files.certFile);
  if (warning !== undefined) logger.warn({ certFile: files.certFile, notAfter: pair.notAfter.toISOString(), daysLeft: pair.daysLeft }, warning);
  return pair;
}

/**
 * SIGHUP: read the pair again and serve it to new connections. A bad new pair (a renewal caught
 * half-copied, a wrong key) is refused with a log line and the pair in use kept. Reloading on a
 * signal rather than on a file-change timer means the operator (or the renewal hook, through
 * `systemctl reload`) says when both files are in place, so a cert written before its key is never
 * seen as a mismatch, and nothing polls the disk.
 */
function reloadOnHangup(server: Parameters<typeof reloadCallerTls>[0], files: CallerTlsFiles | undefined, logger: Logger): () => void {
  return () => {
    if (files === undefined) {
      logger.info('SIGHUP: the caller port serves plain HTTP (no --tls-cert); nothing to reload');
      return;
    }
    let pair: CallerTlsPair;
    try {
      pair = readCallerTls(files);
      reloadCallerTls(server, pair);
    } catch (err) {
      logger.error({ certFile: files.certFile, keyFile: files.keyFile }, `node-edge kept its TLS certificate: the new pair was refused: ${(err as Error).message}`);
      return;
    }
    logger.info({ certFile: files.certFile, serial: pair.serial, notAfter: pair.notAfter.toISOString(), daysLeft: pair.daysLeft }, 'node-edge reloaded its TLS certificate');
    const warning = expiryWarning(pair, files.certFile);
    if (warning !== undefined) logger.warn({ certFile: files.certFile, notAfter: pair.notAfter.toISOString(), daysLeft: pair.daysLeft }, warning);
  };
}

interface Enrolled {
  store: StateStore;
  identity: NodeIdentity;
}

/**
 * The enrolled state dir serve runs on, or what it refuses it with (missing, not writable, not
 * enrolled, no credential). `serve --replicas K`'s supervisor asks it too, before any replica starts.
 */
export async function openEnrolledState(stateDir: string): Promise<Enrolled> {
  const store = await openStateStore(stateDir, { create: false });
  await checkWritable(store);
  const identity = await loadIdentity(store);
  const credentials = await loadCredentials(store);
  if (identity === undefined) throw new NotEnrolledError(`${store.dir} is not enrolled (no identity.json): run \`zenova-node enroll --state-dir ${stateDir} …\` first`);
  // Plain enroll refuses a dir that holds an identity: only --reenroll gets this node a credential again.
  if (credentials === undefined) {
    throw new NotEnrolledError(`${store.dir} holds the identity of node ${identity.nodeName} (id ${identity.nodeId}) but no credential.json: ${reenrollAdvice(identity.nodeName, stateDir)}`);
  }
  return { store, identity };
}

/**
 * Serves until SIGINT/SIGTERM, then stops the control link, stops accepting, lets in-flight
 * requests finish until the deadline, cuts whatever is left, and resolves with the exit code. A bad
 * config file or state dir rejects (LocalConfigError, NotEnrolledError, StateFileError, …) before
 * anything listens; a port that cannot be bound rejects with ListenFailedError once the rest is
 * closed. An enrolled node serves from its verified cache at once, before any contact with the
 * control plane.
 */
export async function serve(opts: ServeOptions): Promise<number> {
  if (opts.configFile !== undefined && opts.stateDir !== undefined) {
    throw new Error('serve takes a config file or a state dir, not both');
  }
  // Checked first: a bad setting or certificate is a one-line refusal before the state dir or spool is opened.
  const env = opts.env ?? process.env;
  const settings = readServeSettings(env, { enrolled: opts.stateDir !== undefined });
  const callerTls = opts.tls !== undefined ? loadCallerTls(opts.tls, opts.logger) : undefined;
  const enrolled = opts.stateDir !== undefined ? await openEnrolledState(opts.stateDir) : undefined;
  const { reconnect } = settings;
  let holder: ConfigHolder;
  let applier: ConfigApplier | undefined;
  let maxBodyBytes: number | undefined;
  if (enrolled !== undefined) {
    ({ holder, applier } = await loadEnrolledConfig(enrolled.store.dir, enrolled.identity, opts.logger));
  } else if (opts.configFile !== undefined) {
    const config = fromLocalConfig(await loadLocalConfig(opts.configFile));
    if (config.apiKeys === null) {
      // Without apiKeys every caller is let in, with the upstreams' keys injected: only for a
      // port no other host can reach.
      if (!isLoopbackHost(opts.listen.host)) {
        throw new LocalConfigError(opts.configFile, [
          `lists no apiKeys, so every caller would be let in, and --listen ${opts.listen.host} is reachable from other hosts: ` +
            'add apiKeys (the SHA-256 of each caller key), or listen on loopback (127.0.0.1 or [::1])',
        ]);
      }
      opts.logger.warn({ file: opts.configFile }, 'the config lists no apiKeys: callers need no key (served on loopback only)');
    }
    holder = ConfigHolder.ready(config);
    maxBodyBytes = config.maxBodyBytes;
  } else {
    throw new Error('serve needs a config file or a state dir');
  }

  let services: NodeServices;
  try {
    services = await openNodeServices({
      stateDir: enrolled?.store.dir,
      nodeId: enrolled?.identity.nodeId ?? 'local',
      holder,
      logger: opts.logger,
      env,
      creditPolicy: settings.credit,
      spoolSynchronous: settings.spoolSynchronous,
      adminListen: opts.adminListen,
    });
  } catch (err) {
    // The admin port taken (or not allowed) is the operator's to fix, as the callers' port is below:
    // said as such, exit 1, not an unexpected failure with a stack.
    const failed = opts.adminListen !== undefined ? listenFailure(err, '--admin-listen', opts.adminListen) : undefined;
    if (failed !== undefined) {
      opts.logger.error({ err: listenFailureLog(err as NodeJS.ErrnoException), adminListen: opts.adminListen }, 'node-edge could not listen on its admin port');
      throw failed;
    }
    opts.logger.error({ err }, 'node-edge could not open its spool, limits, credit or admin port');
    throw err;
  }

  const requestWindow = new RequestWindow();
  const startedAt = new Date();
  // Declared before the app so /readyz can read the link once it exists.
  let link: ControlLinkLeader | undefined;
  // The control plane's time, anchored at each HelloAck: key and lease expiries are judged by it.
  const controlPlaneTime = new ControlPlaneTime();
  // A restart in the same boot while the control plane is out of reach starts from the last anchor
  // (adopt refuses one from an earlier boot), not from this host's wall clock: a clock behind the
  // control plane's would let keys it expired in again.
  if (enrolled !== undefined) {
    const anchor = (await loadControlStatus(enrolled.store).catch(() => undefined))?.clock;
    if (anchor !== undefined) controlPlaneTime.adopt(anchor);
  }
  const app = await buildApp({
    holder,
    logger: opts.logger,
    clock: controlPlaneTime.clock(),
    requestWindow,
    services: services.pipeline,
    ...(maxBodyBytes !== undefined ? { maxBodyBytes } : {}),
    ...(callerTls !== undefined ? { https: callerTls } : {}),
    ...(enrolled !== undefined
      ? {
          controlLink: () => link?.view() ?? { connected: false, since: startedAt },
        }
      : {}),
    ...(applier !== undefined ? { previousEnrollment: () => applier?.servesPreviousTrust() ?? false } : {}),
    spoolState: () => services.spoolState(),
  });
  try {
    await app.listen({ host: opts.listen.host, port: opts.listen.port });
  } catch (err) {
    const failed = listenFailure(err, '--listen', opts.listen);
    // A replica of `serve --replicas K` tells its supervisor, which says it once for all K (every
    // replica meets the same port); it says it itself only when that message cannot be sent.
    // Told first: the supervisor then stops the other replicas while this one closes, and lets it end by itself.
    const replica = failed !== undefined ? replicaWorker(env) : undefined;
    const told = failed !== undefined && replica !== undefined && (await replica.reportListenFailed({ message: failed.message, code: failed.code, reason: (err as Error).message }));
    if (!told) opts.logger.error(failed !== undefined ? { err: listenFailureLog(err as NodeJS.ErrnoException), listen: opts.listen } : { err, listen: opts.listen }, 'node-edge could not listen');
    await app.close();
    await services.close();
    if (told) return 1;
    if (failed !== undefined) throw failed;
    return 1;
  }
  const { port } = app.server.address() as AddressInfo;
  const url = listenUrl(opts.listen.host, port, callerTls !== undefined ? 'https' : 'http');
  const onHangup = reloadOnHangup(app.server, opts.tls, opts.logger);
  process.on('SIGHUP', onHangup);
  // A replica of `serve --replicas K`: its supervisor tells systemd, once every replica listens.
  const replica = replicaWorker(env);
  // Each replica counts its own callers; the link holder's heartbeat sums them all (peer-windows.ts).
  const stopAnsweringWindow = replica === undefined ? undefined : answerWindowOverIpc(() => requestWindow.figures());
  const peerWindows = replica === undefined ? undefined : new PeerWindows(opts.logger);
  if (replica === undefined) notifyReady(opts.logger, `serving on ${url}`);
  if (callerTls === undefined && !isLoopbackHost(opts.listen.host)) {
    opts.logger.warn(
      { url },
      "the caller port serves plain HTTP on a non-loopback address: callers' API keys cross the network in clear; serve HTTPS with --tls-cert FILE --tls-key FILE",
    );
  }
  const served = holder.current();
  opts.logger.info(
    {
      url,
      ...(callerTls !== undefined ? { tls: { certFile: opts.tls?.certFile, serial: callerTls.serial, notAfter: callerTls.notAfter.toISOString(), daysLeft: callerTls.daysLeft } } : {}),
      node: enrolled?.identity.nodeName ?? (served.ready ? served.config.nodeName : null),
      controlPlane: enrolled !== undefined,
      ready: served.ready,
      configVersion: served.ready ? served.config.version : null,
    },
    'node-edge listening',
  );

  // Callers are served first; the control link comes up beside them and never blocks them. Of the
  // node-edge processes on one state dir (ZENOVA_NODE_REPLICAS) only the one holding the control
  // link lock runs it; the others take the config it writes to the cache.
  if (enrolled !== undefined && reconnect !== undefined && applier !== undefined) {
    const configApplier = applier;
    const configHolder = holder;
    /** A re-enrollment while serving: bundles are verified with the new node id and signing key from now on. */
    const takeIdentity = (identity: NodeIdentity): void => {
      configApplier.setTrust({ nodeId: identity.nodeId, publicKeyPem: identity.configSigningPublicKeyPem });
    };
    const startConnect = () =>
      startConnectLoop({
        store: enrolled.store,
        logger: opts.logger,
        facts: { version: productVersion(), hostname: os.hostname(), arch: process.arch },
        figures: () => {
          const own = requestWindow.figures();
          const window = peerWindows === undefined ? own : addFigures(own, peerWindows.figures());
          const spool = services.figures();
          return {
            requests5m: window.requests,
            errors5m: window.errors,
            spoolBytes: spool.spoolBytes,
            backfillBacklog: spool.backfillBacklog,
            // The applier's count, not the holder's: a config that verified under the previous
            // enrollment counts as none, or the new control plane would see it as synced and never push.
            appliedConfigVersion: configApplier.servedVersion(),
            ready: configHolder.current().ready,
          };
        },
        helloConfig: () => ({
          highestAppliedConfigVersion: configApplier.highestAppliedVersion(),
          appliedConfigContentSha256: configApplier.servedContentSha256(),
        }),
        onIdentity: takeIdentity,
        onConfigPush: async (push) => {
          const outcome = await configApplier.apply(push);
          // status follows; the ack need not wait for that file.
          if (outcome.ok && outcome.changed) void link?.configChanged();
          return outcome.ok ? { ok: true } : { ok: false, code: outcome.code, message: outcome.message, retryable: outcome.retryable };
        },
        configStatus: () => configStatus(configHolder, configApplier),
        spoolStatus: () => {
          const spool = services.spoolState();
          return spool === undefined ? undefined : { quotaBytes: spool.quotaBytes, fullPolicy: spool.fullPolicy, full: spool.full, writeFailing: spool.writeFailing };
        },
        channels: services.channels,
        controlPlaneTime,
        reconnect: reconnect.reconnect,
        refusedRetryMs: reconnect.refusedRetryMs,
      });
    /** The link, and with replicas the asking for the others' figures while this process holds it. */
    const startLink = (): ConnectLoop => {
      if (peerWindows === undefined) return startConnect();
      peerWindows.start();
      const loop = startConnect();
      return {
        status: () => loop.status(),
        configChanged: () => loop.configChanged(),
        stop: (options) => {
          peerWindows.stop();
          return loop.stop(options);
        },
      };
    };
    // status and doctor see a full spool or failing writes (on a full disk this write fails too:
    // status then judges free space itself).
    services.onSpoolStateChanged(() => void link?.configChanged());
    link = startControlLinkLeader({
      store: enrolled.store,
      logger: opts.logger,
      startLink,
      follow: async () => {
        const identity = await loadIdentity(enrolled.store).catch(() => undefined);
        if (identity !== undefined) takeIdentity(identity);
        // The link holder's anchor (host-monotonic, so valid in this process too).
        const clock = (await loadControlStatus(enrolled.store).catch(() => undefined))?.clock;
        if (clock !== undefined) controlPlaneTime.adopt(clock);
        await configApplier.followCache();
      },
      ...(settings.linkLockIntervalMs !== undefined ? { intervalMs: settings.linkLockIntervalMs } : {}),
    });
  }

  const drainMs = opts.shutdownDeadlineMs ?? settings.shutdownDrainMs ?? SHUTDOWN_DEADLINE_MS;
  let ending = false;
  /** Ends the requests still running with ZN_ERR_NODE_STOPPING, then closes the connections left. */
  const endRemaining = (why: string): void => {
    if (ending) return;
    ending = true;
    opts.logger.warn({ requests: app.inFlight.size }, `${why}: the requests still running are ended (ZN_ERR_NODE_STOPPING)`);
    void endRunningRequests(app, services.pipeline.spool, STOPPING_ANSWER_GRACE_MS);
  };
  // The supervisor's /readyz on the admin port asks every replica what its /readyz would answer.
  const stopAnsweringReadiness =
    replica === undefined
      ? undefined
      : answerReadinessOverIpc(() => {
          const body = readiness({
            holder,
            ...(enrolled !== undefined ? { controlLink: () => link?.view() ?? { connected: false, since: startedAt } } : {}),
            ...(applier !== undefined ? { previousEnrollment: () => applier?.servesPreviousTrust() ?? false } : {}),
            spool: () => services.spoolState(),
          });
          return { ready: body.ready, body };
        });
  return new Promise<number>((resolve) => {
    let stopping = false;
    const onSignal = (signal: NodeJS.Signals): void => {
      if (stopping) {
        // A second signal means "now": the requests still running are ended instead of waited for.
        endRemaining('a second stop signal');
        return;
      }
      stopping = true;
      opts.logger.info({ signal }, 'node-edge stopping');
      notifyStopping(opts.logger);
      const deadline = setTimeout(() => endRemaining('the shutdown deadline passed'), drainMs);
      deadline.unref();
      // Callers drain first (their records and settlements still land), then unspent credit goes
      // back over the still-open session and the link stops once the control plane confirmed it
      // (or a few seconds passed: ending the stream earlier discards the returns); the spool closes last.
      app.close()
        .then(() => services.beforeControlStop())
        .then(() => link?.stop())
        .then(() => services.close())
        .then(
        () => {
          clearTimeout(deadline);
          process.off('SIGINT', onSignal).off('SIGTERM', onSignal).off('SIGHUP', onHangup);
          process.off('SIGINT', onReplicaSignal).off('SIGTERM', onReplicaSignal);
          stopOrders?.();
          stopAnsweringReadiness?.();
          stopAnsweringWindow?.();
          opts.logger.info('node-edge stopped');
          resolve(0);
        },
        (err: unknown) => {
          process.off('SIGHUP', onHangup);
          opts.logger.error({ err }, 'node-edge did not close cleanly');
          resolve(1);
        },
      );
    };
    // A replica drains on the first signal it gets and ignores repeats: the same stop often reaches
    // it twice (the unit's or terminal's signal, and its supervisor's order); "now" comes as an order.
    function onReplicaSignal(signal: NodeJS.Signals): void {
      if (!stopping) onSignal(signal);
    }
    const stopOrders = replica?.onStop((now) => {
      if (!stopping) onSignal('SIGTERM');
      if (now) endRemaining('the supervisor asked to stop now');
    });
    if (replica === undefined) {
      process.on('SIGINT', onSignal).on('SIGTERM', onSignal);
      return;
    }
    process.on('SIGINT', onReplicaSignal).on('SIGTERM', onReplicaSignal);
    replica.reportListening(url);
  });
}

/**
 * The callers' or the admin port could not be bound: the operator's to fix, not an unexpected
 * failure. The message is the CLI's one stderr line (exit 1): the address, the cause in words and
 * its code, and what to do, in the installer's words (NODE-PORT-IN-USE, NODE-LISTEN-UNAVAILABLE).
 */
export class ListenFailedError extends Error {
  readonly code: string;
  constructor(message: string, code: string) {
    super(message);
    this.name = 'ListenFailedError';
    this.code = code;
  }
}

/** What a bind error means, by its code (as installer/src/install/host-checks.ts says it). */
const BIND_ERROR_MEANINGS: Record<string, string> = {
  EADDRINUSE: 'the port is already in use by another program',
  EADDRNOTAVAIL: "the address is not one of this host's",
  ENOTFOUND: 'the name does not resolve',
  EAI_AGAIN: 'the name could not be resolved (DNS did not answer)',
  EACCES: 'permission denied (ports below 1024 need root)',
  EAFNOSUPPORT: 'this host does not support the address family',
};

/**
 * A failure of listen(2) (EADDRINUSE, EACCES, EADDRNOTAVAIL…) or of resolving the host to listen
 * on, as Node reports it: a replica (a cluster worker, --replicas) gets the primary's bind failure
 * as syscall `bind`.
 */
function isListenError(err: unknown): err is NodeJS.ErrnoException {
  if (typeof err !== 'object' || err === null) return false;
  const { syscall, code } = err as { syscall?: unknown; code?: unknown };
  return syscall === 'listen' || syscall === 'bind' || (syscall === 'getaddrinfo' && (code === 'ENOTFOUND' || code === 'EAI_AGAIN'));
}

/**
 * `err` as a ListenFailedError naming `flag`'s address, when it is a listen failure; else
 * undefined. `flag`: --listen (the callers' port) or --admin-listen (loopback only).
 */
export function listenFailure(err: unknown, flag: '--listen' | '--admin-listen', listen: ListenAddress): ListenFailedError | undefined {
  if (!isListenError(err)) return undefined;
  const code = err.code ?? 'unknown error';
  const address = `${listen.host.includes(':') ? `[${listen.host}]` : listen.host}:${listen.port}`;
  const meaning = Object.hasOwn(BIND_ERROR_MEANINGS, code) ? `${BIND_ERROR_MEANINGS[code]} (${code})` : `${err.message} (${code})`;
  const anAddress = flag === '--admin-listen' ? 'a loopback address of this host (127.0.0.1 or [::1])' : 'an address of this host (or 0.0.0.0 for all of them)';
  const example = flag === '--admin-listen' ? '127.0.0.1:9480' : '0.0.0.0:7480';
  const advice =
    code === 'EADDRINUSE'
      ? `stop the program using it, or pass ${flag} HOST:PORT with a free port`
      : code === 'EACCES'
        ? `pass ${flag} HOST:PORT with a port from 1024 up, or run node-edge with the right to bind low ports (CAP_NET_BIND_SERVICE)`
        : `pass ${flag} with ${anAddress} and a free port, e.g. ${flag} ${example}`;
  return new ListenFailedError(`cannot listen on ${address} (${flag}): ${meaning}; ${advice}`, code);
}

/** A listen failure for the log: its code and message, no stack (the CLI says it on stderr). */
export function listenFailureLog(err: NodeJS.ErrnoException): { code: string | undefined; reason: string } {
  return { code: err.code, reason: err.message };
}
