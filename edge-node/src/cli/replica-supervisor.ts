/**
 * `zenova-node serve --replicas K` (K > 1): this process supervises K node-edge processes (cluster
 * workers) serving one state dir. Each runs the normal serve with ZENOVA_NODE_REPLICAS=K, which
 * already makes replicas share rate limits, spool, control link and credit leases; they share the
 * caller port through this process (cluster's round-robin: it accepts and hands each connection to
 * a replica), which Node 20 cannot do with `reusePort`.
 *
 * The supervisor opens nothing in the state dir (the replicas do); it only checks, before starting
 * any, that serve would not refuse the dir (refuseUnservableStateDir). It tells systemd READY=1 once
 * every replica listens and STOPPING=1 on SIGTERM/SIGINT; hands the stop (drain, and "now" on a
 * second signal) to every replica and SIGHUP (TLS reload) too; restarts a replica that dies with
 * back-off, unless it refused its settings (exit 2) before listening, which stops the node with 2,
 * or could not bind `--listen` while the node started (every replica meets the same port: it tells
 * this process, which logs it and has the CLI say it once, exit 1, as a lone node does);
 * serves the admin port for all of them (replica-admin.ts), and gives the control link's holder the
 * other replicas' heartbeat figures (peer-windows.ts).
 */
import cluster from 'node:cluster';
import type { Worker } from 'node:cluster';
import type { Readable, Writable } from 'node:stream';
import { NUMBER_SHAPE, givenValue } from '../../../proto/src/cli-usage-errors.js';
import { Backoff } from '../control/backoff.js';
import type { Logger } from '../logger.js';
import { startAdminServer } from '../metrics/admin-server.js';
import type { AdminServer } from '../metrics/admin-server.js';
import { Counter, Gauge, Registry } from '../metrics/prometheus-registry.js';
import { PEER_ANSWER_MS } from '../metrics/peer-windows.js';
import { REPLICA_INDEX_ENV, answerPeerWindows, askReplica, isPeerWindowQuestion, mergeReplicaMetrics } from '../metrics/replica-admin.js';
import { notifyReady, notifyStopping } from '../service/sd-notify.js';
import type { ListenAddress } from './args.js';
import { SUPERVISOR_SAYS_LISTEN_FAILURES_ENV, isListenFailedMessage, isListeningMessage } from './replica-worker.js';
import type { ReplicaListenFailedMessage, ReplicaStopMessage } from './replica-worker.js';
import { ListenFailedError, SHUTDOWN_DEADLINE_MS, listenFailure, listenFailureLog, openEnrolledState } from './serve.js';
import { ServeSettingError, readServeSettings } from './serve-settings.js';

/**
 * Past the drain, how long the replicas may take to end what still runs, return credit (at most
 * 5 s) and close their spool before they are killed.
 */
const STOP_MARGIN_MS = 10_000;
/** Restart back-off: the first step and the cap. */
const RESTART_BASE_MS = 1_000;
const RESTART_MAX_MS = 60_000;
/** A replica that served this long before it died starts again from the first back-off step. */
const HEALTHY_RUN_MS = 30_000;
/** How long a scrape of the admin port waits for each replica's answer. */
const ADMIN_ANSWER_MS = 2_000;

export interface ReplicaSupervisorOptions {
  replicas: number;
  /** Where the replicas' caller port listens (each replica reports its URL). */
  listen: ListenAddress;
  /** The node's admin port, answered here for every replica. */
  adminListen?: ListenAddress;
  /** The serve settings are checked here first (one refusal instead of K); ZENOVA_NODE_REPLICAS is set to K for the replicas. */
  env: NodeJS.ProcessEnv;
  /** The replicas' state dir: checked here before any starts, as serve checks it (one refusal instead of K). */
  stateDir?: string;
  logger: Logger;
}

/**
 * `--replicas K` with ZENOVA_NODE_REPLICAS set to another number: one of them is a mistake (an old
 * env file line?), and which is meant cannot be told.
 */
export function checkReplicasAgainstEnv(replicas: number, env: NodeJS.ProcessEnv): void {
  const raw = env.ZENOVA_NODE_REPLICAS;
  if (raw === undefined || raw === '') return;
  if (/^\d{1,3}$/.test(raw) && Number(raw) === replicas) return;
  // Named back only when it looks like a number: an env file line may hold a token pasted in the wrong place.
  const setting = givenValue(raw, NUMBER_SHAPE, 'a number', { shown: 'ZENOVA_NODE_REPLICAS=', notShown: 'ZENOVA_NODE_REPLICAS' });
  throw new ServeSettingError(
    `--replicas ${replicas} disagrees with ${setting} in the environment: ` +
      `--replicas sets it for the processes it starts; remove ZENOVA_NODE_REPLICAS (or set it to ${replicas})`,
  );
}

/**
 * Throws what serve (openEnrolledState) would refuse the state dir with before listening — missing,
 * not writable, not enrolled or without its credential, in serve's words — so it is said once,
 * before any replica starts, instead of once by each of K replicas. Only reads the dir.
 */
export async function refuseUnservableStateDir(stateDir: string): Promise<void> {
  await openEnrolledState(stateDir);
}

interface Slot {
  index: number;
  worker: Worker | undefined;
  /** The current worker reported it listens (its stop handlers are in place). */
  listening: boolean;
  listeningSince: number;
  backoff: Backoff;
  restartTimer: NodeJS.Timeout | undefined;
  /** How the last worker of this slot ended while the node was stopping. */
  stoppedCleanly: boolean;
  /** The current worker could not listen (it told us, and ends by itself). */
  listenFailed: boolean;
}

/**
 * Copies a replica's output to ours whole lines at a time, so two replicas' lines never interleave
 * (stdout to a pipe or socket is written synchronously on Linux: each write goes out whole).
 */
function relayLines(from: Readable | null | undefined, to: Writable): void {
  if (from == null) return;
  // Our stdout gone (EPIPE): the lines are dropped, as a lone node's logger drops them; never a crash.
  if (to.listenerCount('error') === 0) to.on('error', () => undefined);
  let partial: Buffer = Buffer.alloc(0);
  from.on('data', (chunk: Buffer) => {
    const data = partial.length === 0 ? chunk : Buffer.concat([partial, chunk]);
    const end = data.lastIndexOf(0x0a);
    if (end === -1) {
      partial = data;
      return;
    }
    to.write(data.subarray(0, end + 1));
    partial = Buffer.from(data.subarray(end + 1));
  });
  from.on('end', () => {
    if (partial.length > 0) to.write(Buffer.concat([partial, Buffer.from('\n')]));
    partial = Buffer.alloc(0);
  });
}

/** Runs the replicas until a stop signal and resolves with the exit code (0: every replica stopped cleanly). */
export async function superviseReplicas(opts: ReplicaSupervisorOptions): Promise<number> {
  const { replicas, logger } = opts;
  checkReplicasAgainstEnv(replicas, opts.env);
  const replicaEnv = { ...opts.env, ZENOVA_NODE_REPLICAS: String(replicas), [SUPERVISOR_SAYS_LISTEN_FAILURES_ENV]: '1' };
  // A bad setting is one line here, not K from the replicas (exit 2 through run-cli).
  const settings = readServeSettings(replicaEnv, { enrolled: true });
  if (opts.stateDir !== undefined) await refuseUnservableStateDir(opts.stateDir);
  const stopBoundMs = (settings.shutdownDrainMs ?? SHUTDOWN_DEADLINE_MS) + STOP_MARGIN_MS;

  const slots: Slot[] = Array.from({ length: replicas }, (_, i) => ({
    index: i + 1,
    worker: undefined,
    listening: false,
    listeningSince: 0,
    backoff: new Backoff({ baseMs: RESTART_BASE_MS, maxMs: RESTART_MAX_MS }),
    restartTimer: undefined,
    stoppedCleanly: true,
    listenFailed: false,
  }));

  const registry = new Registry();
  registry.register(new Gauge('zenova_node_replicas', 'node-edge processes this supervisor runs (serve --replicas).', [], () => replicas));
  const up = registry.register(new Gauge('zenova_node_replica_up', '1 when the replica answered this scrape (its samples carry the same replica label), else 0.', ['replica']));
  const restartsTotal = registry.register(new Counter('zenova_node_replica_restarts_total', 'Times the supervisor started a replica again after it died.', ['replica']));
  for (const slot of slots) restartsTotal.labels(String(slot.index));

  const renderMetrics = async (): Promise<string> => {
    const answers = await Promise.all(
      slots.map(async (slot) => {
        const answer = slot.worker !== undefined && slot.listening ? await askReplica(slot.worker, 'metrics', ADMIN_ANSWER_MS) : undefined;
        const text = answer?.zenovaAdmin === 'metrics' ? answer.text : undefined;
        up.labels(String(slot.index)).set(text !== undefined ? 1 : 0);
        return text === undefined ? undefined : { replica: String(slot.index), text };
      }),
    );
    return mergeReplicaMetrics(answers.filter((a): a is { replica: string; text: string } => a !== undefined)) + registry.render();
  };
  const readiness = async (): Promise<{ ready: boolean; body: unknown }> => {
    const states = await Promise.all(
      slots.map(async (slot) => {
        const base = { replica: slot.index, pid: slot.worker?.process.pid ?? null };
        if (slot.worker === undefined || !slot.listening) return { ...base, ready: false, reason: 'the replica is starting' };
        const answer = await askReplica(slot.worker, 'readyz', ADMIN_ANSWER_MS);
        if (answer?.zenovaAdmin !== 'readyz' || answer.readiness === undefined) return { ...base, ready: false, reason: 'the replica did not answer' };
        return { ...base, ...(answer.readiness.body as object), ready: answer.readiness.ready };
      }),
    );
    const ready = states.every((s) => s.ready);
    return { ready, body: { ready, replicas: states } };
  };

  let admin: AdminServer | undefined;
  if (opts.adminListen !== undefined) {
    try {
      admin = await startAdminServer({ host: opts.adminListen.host, port: opts.adminListen.port, renderMetrics, readiness });
    } catch (err) {
      // Said on stderr by the CLI (exit 1); the log keeps the code and message, no stack.
      const failed = listenFailure(err, '--admin-listen', opts.adminListen);
      logger.error({ err: failed !== undefined ? listenFailureLog(err as NodeJS.ErrnoException) : err, adminListen: opts.adminListen }, 'node-edge could not listen on its admin port');
      if (failed !== undefined) throw failed;
      return 1;
    }
    logger.info({ url: admin.url }, 'admin listening');
  }

  // Round-robin whatever NODE_CLUSTER_SCHED_POLICY says: the point of replicas is to spread callers.
  cluster.schedulingPolicy = cluster.SCHED_RR;
  // The replicas run this same entry and command line; their output comes through relayLines.
  cluster.setupPrimary({ stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });

  return new Promise<number>((resolve, reject) => {
    let phase: 'starting' | 'serving' | 'stopping' = 'starting';
    let forcedCode: number | undefined;
    let stopNowSent = false;
    let killTimer: NodeJS.Timeout | undefined;
    let url: string | undefined;
    /**
     * The `--listen` failure a replica reported while the node was starting: every replica meets
     * the same port, so it is logged once and, when the node stops for it, said once by the CLI.
     */
    let listenFailed: ListenFailedError | undefined;

    const live = (): Slot[] => slots.filter((s) => s.worker !== undefined);

    const finish = (): void => {
      if (phase !== 'stopping' || live().length > 0) return;
      clearTimeout(killTimer);
      process.off('SIGTERM', onStopSignal).off('SIGINT', onStopSignal).off('SIGHUP', onHangup);
      const code = forcedCode ?? (slots.every((s) => s.stoppedCleanly) ? 0 : 1);
      const closed = admin?.close() ?? Promise.resolve();
      void closed.then(() => {
        logger.info({ code }, code === 0 ? 'node-edge stopped (every replica stopped cleanly)' : 'node-edge stopped');
        // Said on stderr by the CLI (exit 1), once for every replica that met it.
        if (listenFailed !== undefined && code === 1) reject(listenFailed);
        else resolve(code);
      });
    };

    const sendStop = (slot: Slot, now: boolean): void => {
      const worker = slot.worker;
      // One that could not listen ends by itself once it closed what it opened.
      if (worker === undefined || slot.listenFailed) return;
      if (!slot.listening) {
        // Still starting: it has no stop handler yet, so a signal ends it (as one would end a lone node starting).
        if (!now) worker.process.kill('SIGTERM');
        return;
      }
      try {
        worker.send({ zenovaReplica: 'stop', now } satisfies ReplicaStopMessage, undefined, () => undefined);
      } catch {
        worker.process.kill('SIGTERM');
      }
    };

    const beginStop = (why: string, code?: number): void => {
      if (phase === 'stopping') return;
      phase = 'stopping';
      forcedCode = code;
      notifyStopping(logger);
      logger.info({ replicas: live().length }, `node-edge stopping: ${why}`);
      for (const slot of slots) {
        clearTimeout(slot.restartTimer);
        slot.restartTimer = undefined;
        sendStop(slot, false);
      }
      killTimer = setTimeout(() => {
        for (const slot of live()) {
          logger.error({ replica: slot.index, replicaPid: slot.worker?.process.pid }, `node-edge replica ${slot.index} did not stop within ${stopBoundMs} ms: killed`);
          slot.worker?.process.kill('SIGKILL');
        }
      }, stopBoundMs);
      finish();
    };

    function onStopSignal(signal: NodeJS.Signals): void {
      if (phase !== 'stopping') {
        beginStop(`${signal}`);
        return;
      }
      // A second signal means "now", as for a lone node: the requests still running are ended.
      if (stopNowSent) return;
      stopNowSent = true;
      logger.warn({ signal }, 'a second stop signal: the replicas end the requests still running');
      for (const slot of slots) sendStop(slot, true);
    }

    function onHangup(): void {
      // A replica closing removes its SIGHUP handler last: the signal would end it instead.
      if (phase === 'stopping') return;
      const reloading = slots.filter((s) => s.worker !== undefined && s.listening);
      logger.info({ replicas: reloading.map((s) => s.index) }, 'SIGHUP: the replicas read their TLS certificate again');
      // A replica still starting reads the files as it starts, and has no SIGHUP handler yet (the signal would end it).
      for (const slot of reloading) slot.worker?.process.kill('SIGHUP');
    }

    const start = (slot: Slot): void => {
      slot.restartTimer = undefined;
      slot.listening = false;
      slot.listenFailed = false;
      const worker = cluster.fork({ ...replicaEnv, [REPLICA_INDEX_ENV]: String(slot.index), NOTIFY_SOCKET: '' });
      slot.worker = worker;
      relayLines(worker.process.stdout, process.stdout);
      relayLines(worker.process.stderr, process.stderr);
      worker.on('error', (err: Error) => logger.warn({ err, replica: slot.index }, `node-edge replica ${slot.index}: ${err.message}`));
      worker.on('message', (message: unknown) => {
        if (isPeerWindowQuestion(message)) {
          // The control link's holder sums every replica's figures into its heartbeat: the others',
          // from their current processes (a replica started again counts from its restart, once).
          const others = slots.flatMap((s) => (s !== slot && s.worker !== undefined && s.listening ? [{ replica: s.index, worker: s.worker }] : []));
          void answerPeerWindows(worker, message, others, PEER_ANSWER_MS);
          return;
        }
        if (isListenFailedMessage(message)) {
          onListenFailed(slot, worker, message);
          return;
        }
        if (!isListeningMessage(message) || slot.worker !== worker) return;
        slot.listening = true;
        slot.listeningSince = performance.now();
        url ??= message.url;
        if (phase === 'stopping') {
          // Told to stop while it was starting, before it could take an order: take it now.
          sendStop(slot, stopNowSent);
          return;
        }
        if (phase === 'starting' && slots.every((s) => s.listening)) {
          phase = 'serving';
          logger.info({ url, replicas }, 'node-edge replicas listening');
          notifyReady(logger, `serving on ${url} with ${replicas} replicas`);
        }
      });
      worker.on('exit', (code: number | null, signal: NodeJS.Signals | null) => onExit(slot, worker, code, signal));
      logger.info({ replica: slot.index, replicaPid: worker.process.pid }, `node-edge replica ${slot.index} starting`);
    };

    const onListenFailed = (slot: Slot, worker: Worker, failure: ReplicaListenFailedMessage): void => {
      if (slot.worker === worker) slot.listenFailed = true;
      const line = { err: { code: failure.code, reason: failure.reason }, listen: opts.listen };
      // The others' failures are the same one as the first (the node is stopping for it): said once.
      if (listenFailed !== undefined) return;
      if (phase !== 'starting') {
        // A replica started again after the node served (the port taken meanwhile): its exit is logged
        // and it is started again; while stopping, the node was not stopped for it (nor is it said so).
        logger.error({ ...line, replica: slot.index }, 'node-edge could not listen');
        return;
      }
      listenFailed = new ListenFailedError(failure.message, failure.code);
      logger.error(line, 'node-edge could not listen');
      beginStop('a replica could not listen', 1);
    };

    const onExit = (slot: Slot, worker: Worker, code: number | null, signal: NodeJS.Signals | null): void => {
      if (slot.worker !== worker) return;
      const listened = slot.listening;
      const listenFailedHere = slot.listenFailed;
      slot.worker = undefined;
      slot.listenFailed = false;
      slot.listening = false;
      // replicaPid: every line already carries the supervisor's own `pid`.
      const how = { replica: slot.index, replicaPid: worker.process.pid, code, signal };
      if (phase === 'stopping') {
        slot.stoppedCleanly = code === 0 && signal === null;
        // A replica that never listened while the node stops for a listen failure: that failure says why.
        const explained = listenFailedHere || (!listened && listenFailed !== undefined);
        if (!slot.stoppedCleanly && !explained) logger.warn(how, `node-edge replica ${slot.index} stopped with ${signal !== null ? `signal ${signal}` : `exit code ${code}`}`);
        finish();
        return;
      }
      if (!listened && code === 2) {
        logger.error(how, `node-edge replica ${slot.index} refused its settings (exit 2): stopping the node`);
        beginStop('a replica refused its settings', 2);
        return;
      }
      if (!listened && phase === 'starting') {
        logger.error(how, `node-edge replica ${slot.index} exited before it listened: stopping the node`);
        beginStop('a replica could not start', code !== null && code !== 0 ? code : 1);
        return;
      }
      if (listened && performance.now() - slot.listeningSince >= HEALTHY_RUN_MS) slot.backoff.reset();
      const delayMs = slot.backoff.next();
      logger.error(
        how,
        `node-edge replica ${slot.index} exited unexpectedly (${signal !== null ? `signal ${signal}` : `exit code ${code}`}): starting it again in ${delayMs} ms`,
      );
      slot.restartTimer = setTimeout(() => {
        if (phase === 'stopping') return;
        restartsTotal.labels(String(slot.index)).inc();
        start(slot);
      }, delayMs);
    };

    process.on('SIGTERM', onStopSignal).on('SIGINT', onStopSignal).on('SIGHUP', onHangup);
    logger.info({ replicas, listen: opts.listen }, `node-edge starting ${replicas} replicas`);
    for (const slot of slots) start(slot);
  });
}
