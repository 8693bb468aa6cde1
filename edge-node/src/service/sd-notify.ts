/**
 * systemd readiness (Type=notify) for node-edge: READY=1, STOPPING=1 and STATUS= sent to
 * $NOTIFY_SOCKET.
 *
 * Node has no unix datagram sockets, so the message goes through systemd's own `systemd-notify`
 * (execFile, no shell). systemd-notify sends with SCM_CREDENTIALS naming its parent (this
 * process) when it may (root), so the message is attributed to node-edge's main PID even after the
 * helper exits; the unit also sets NotifyAccess=all so a non-root node-edge is believed too. The
 * helper's lookup of the service cgroup is the only race, and NotifyAccess=all covers it.
 * Without NOTIFY_SOCKET (not under systemd, tests, containers) nothing is sent and nothing spawned.
 */
import { execFile } from 'node:child_process';
import type { Logger } from '../logger.js';

const NOTIFY_TIMEOUT_MS = 5_000;
const MAX_STATUS_CHARS = 200;

/** Runs the notification; the default spawns systemd-notify. Replaceable for tests. */
export type NotifySender = (args: string[], env: NodeJS.ProcessEnv) => Promise<void>;

const systemdNotify: NotifySender = (args, env) =>
  new Promise((resolve, reject) => {
    execFile('systemd-notify', args, { env, timeout: NOTIFY_TIMEOUT_MS }, (err) => (err ? reject(new Error(err.message)) : resolve()));
  });

/** The arguments for one notification: `--ready`/`--status=` flags plus raw assignments. */
export function notifyArgs(kind: 'ready' | 'stopping', status?: string): string[] {
  const args = kind === 'ready' ? ['--ready'] : ['STOPPING=1'];
  if (status !== undefined) args.push(`--status=${status.replace(/[\r\n]+/g, ' ').slice(0, MAX_STATUS_CHARS)}`);
  args.push(`--pid=${process.pid}`);
  return args;
}

function send(logger: Logger, args: string[], env: NodeJS.ProcessEnv, sender: NotifySender): Promise<void> {
  if (env.NOTIFY_SOCKET === undefined || env.NOTIFY_SOCKET === '') return Promise.resolve();
  return sender(args, env).catch((err: unknown) => {
    // A lost READY=1 makes systemd time the start out; say so loudly but keep serving.
    logger.error({ err: { message: (err as Error).message }, notify: args[0] }, 'could not notify systemd (systemd-notify failed)');
  });
}

/** Sends one notification; resolves when sent (or skipped, or failed and logged). */
export function sendNotification(
  logger: Logger,
  kind: 'ready' | 'stopping',
  opts: { status?: string; env?: NodeJS.ProcessEnv; sender?: NotifySender } = {},
): Promise<void> {
  return send(logger, notifyArgs(kind, opts.status), opts.env ?? process.env, opts.sender ?? systemdNotify);
}

/** Tells the service manager the node is ready (READY=1), when NOTIFY_SOCKET is set. Fire and forget. */
export function notifyReady(logger: Logger, status: string): void {
  void sendNotification(logger, 'ready', { status });
}

/** Tells the service manager the node is stopping (STOPPING=1). Fire and forget. */
export function notifyStopping(logger: Logger): void {
  void sendNotification(logger, 'stopping');
}
