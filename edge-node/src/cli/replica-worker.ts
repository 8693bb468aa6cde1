/**
 * A replica's side of `zenova-node serve --replicas K` (replica-supervisor.ts): it runs the normal
 * serve, tells the supervisor once it listens, and takes its stop orders over IPC.
 *
 * Stops come over IPC rather than as forwarded signals because the signal often reaches the
 * replicas directly too: systemd's default KillMode=control-group sends SIGTERM to every process of
 * the unit, and a terminal's Ctrl-C goes to the whole process group. A forwarded signal would then
 * be each replica's second one, which means "end the requests now" instead of a drain.
 */
import { replicaIndex } from '../metrics/replica-admin.js';

/** Replica → supervisor: serving, with every stop handler in place. */
export interface ReplicaListeningMessage {
  zenovaReplica: 'listening';
  url: string;
}

/**
 * Replica → supervisor: its `--listen` could not be bound (serve.ts's ListenFailedError, and the
 * error's own message as `reason`). Every replica meets the same port, so the supervisor says it
 * once (the CLI's stderr line and the log line) instead of each replica saying it.
 */
export interface ReplicaListenFailedMessage {
  zenovaReplica: 'listen-failed';
  message: string;
  code: string;
  reason: string;
}

/**
 * Set by a supervisor that says its replicas' listen failures (the `listen-failed` message). A
 * supervisor of an older release (a replica forked after an in-place upgrade runs the new code
 * under the old supervisor) does not set it and ignores the message, so the replica says it itself.
 */
export const SUPERVISOR_SAYS_LISTEN_FAILURES_ENV = 'ZENOVA_NODE_SUPERVISOR_SAYS_LISTEN_FAILURES';

/** Supervisor → replica: drain and stop (`now`: end the requests still running, as a second signal does). */
export interface ReplicaStopMessage {
  zenovaReplica: 'stop';
  now: boolean;
}

export function isListeningMessage(message: unknown): message is ReplicaListeningMessage {
  const m = message as Partial<ReplicaListeningMessage> | null;
  return typeof m === 'object' && m !== null && m.zenovaReplica === 'listening' && typeof m.url === 'string';
}

export function isListenFailedMessage(message: unknown): message is ReplicaListenFailedMessage {
  const m = message as Partial<ReplicaListenFailedMessage> | null;
  return (
    typeof m === 'object' && m !== null && m.zenovaReplica === 'listen-failed' && typeof m.message === 'string' && typeof m.code === 'string' && typeof m.reason === 'string'
  );
}

function isStopMessage(message: unknown): message is ReplicaStopMessage {
  const m = message as Partial<ReplicaStopMessage> | null;
  return typeof m === 'object' && m !== null && m.zenovaReplica === 'stop' && typeof m.now === 'boolean';
}

export interface ReplicaWorker {
  /** The slot (1..K) this process fills. */
  index: number;
  /** Tells the supervisor this replica serves on `url`. */
  reportListening(url: string): void;
  /**
   * Tells the supervisor this replica could not listen; resolves true once the message is handed
   * over (the supervisor then says it), false when it could not be or the supervisor would not
   * say it (SUPERVISOR_SAYS_LISTEN_FAILURES_ENV unset): the replica then says it itself.
   */
  reportListenFailed(failure: Omit<ReplicaListenFailedMessage, 'zenovaReplica'>): Promise<boolean>;
  /** Calls `handler` on each stop order; returns the undo. */
  onStop(handler: (now: boolean) => void): () => void;
}

/** This process as a replica of a supervisor; undefined for a node serving on its own. */
export function replicaWorker(env: NodeJS.ProcessEnv = process.env): ReplicaWorker | undefined {
  const index = replicaIndex(env);
  if (index === undefined) return undefined;
  return {
    index,
    reportListening: (url) => {
      process.send?.({ zenovaReplica: 'listening', url } satisfies ReplicaListeningMessage, undefined, undefined, () => undefined);
    },
    reportListenFailed: (failure) =>
      new Promise<boolean>((resolve) => {
        if (env[SUPERVISOR_SAYS_LISTEN_FAILURES_ENV] !== '1' || process.send === undefined || !process.connected) {
          resolve(false);
          return;
        }
        try {
          process.send({ zenovaReplica: 'listen-failed', ...failure } satisfies ReplicaListenFailedMessage, undefined, undefined, (err) => resolve(err == null));
        } catch {
          resolve(false);
        }
      }),
    onStop: (handler) => {
      const listener = (message: unknown): void => {
        if (isStopMessage(message)) handler(message.now);
      };
      process.on('message', listener);
      return () => void process.off('message', listener);
    },
  };
}
