// systemd readiness (Type=notify) for node-edge (owner: installer). Stub: does nothing yet.
import type { Logger } from '../logger.js';

/** Tells the service manager the node is ready (READY=1), when NOTIFY_SOCKET is set. */
export function notifyReady(logger: Logger, status: string): void {
  void logger;
  void status;
}

/** Tells the service manager the node is stopping (STOPPING=1). */
export function notifyStopping(logger: Logger): void {
  void logger;
}
