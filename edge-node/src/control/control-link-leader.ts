/**
 * Runs the control link in exactly one node-edge process of a state dir (control-link-lock.ts):
 * every `intervalMs` the holder renews its lock and the others try to take it, so a replica takes
 * over within about `intervalMs` of a holder killed in this pid namespace (at most `ttlMs +
 * intervalMs` otherwise). A process that is not the holder follows: it takes the config the holder
 * wrote to the cache (`follow`) and reports the holder's link (control-status.json) in /readyz. If
 * the lock file cannot be opened the link runs here anyway (logged): a node with one process must
 * never lose its control plane over a lock.
 *
 * A holder gives the link up only when a read of the lock shows another live holder. A renew that
 * fails (the state dir's disk full, the file failing) keeps the link: taking the lock is a write to
 * the same file, so no other replica can take it while this one cannot renew it; when writes work
 * again the next renew succeeds, or, if a replica wrote first (this row stale by then), the renew
 * finds the row taken and the link stops: two links for at most one interval, as after any stale
 * holder, and the control plane keeps only the newer session. A link that stops while this process
 * goes on serving records why in control-status.json and in /readyz.
 */
import type { Logger } from '../logger.js';
import type { StateStore } from '../state/state-store.js';
import type { ConnectLoop } from './connect-loop.js';
import { ControlLinkLock } from './control-link-lock.js';
import { isProcessAlive } from '../process-alive.js';
import type { ControlLinkLockOptions, LockHolder } from './control-link-lock.js';
import { loadControlStatus } from './control-status.js';

export const DEFAULT_LOCK_INTERVAL_MS = 2_000;

export interface ControlLinkLeaderOptions {
  store: StateStore;
  logger: Logger;
  /** Starts this process's connect loop (called when it becomes the holder). */
  startLink: () => ConnectLoop;
  /** Each tick while another process holds the link: pick up what it wrote. */
  follow?: () => Promise<void>;
  intervalMs?: number;
  lock?: ControlLinkLockOptions;
}

export interface ControlLinkView {
  connected: boolean;
  since: Date;
  /** Why the link is down, while it is (the last error, unresolved): /readyz shows its code and advice. */
  problem?: ControlLinkProblem;
}

export interface ControlLinkProblem {
  code: string;
  advice?: string;
  at: Date;
}

/** The last error while it still explains a link that is down; undefined once a session came back. */
function currentProblem(connected: boolean, lastError: { code: string; advice?: string | undefined; at: Date | string; resolvedAt?: unknown } | null): ControlLinkProblem | undefined {
  if (connected || lastError === null || lastError.resolvedAt !== undefined) return undefined;
  return { code: lastError.code, at: new Date(lastError.at), ...(lastError.advice !== undefined ? { advice: lastError.advice } : {}) };
}

export interface ControlLinkLeader {
  /** Whether this process runs the link now. */
  isHolder(): boolean;
  /** This process's link, or the holder's as it last wrote control-status.json. */
  view(): ControlLinkView;
  /** The served config or the spool's state changed: the holder rewrites control-status.json. */
  configChanged(): Promise<void>;
  /** Stops the link (if held) and gives the lock up. */
  stop(): Promise<void>;
}

export function startControlLinkLeader(opts: ControlLinkLeaderOptions): ControlLinkLeader {
  const { logger } = opts;
  const intervalMs = opts.intervalMs ?? DEFAULT_LOCK_INTERVAL_MS;
  const startedAt = new Date();
  let loop: ConnectLoop | undefined;
  let followed: ControlLinkView = { connected: false, since: startedAt };
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let lockFailing = false;
  let renewFailing = false;

  let lock: ControlLinkLock | undefined;
  try {
    lock = new ControlLinkLock(opts.store.dir, opts.lock);
  } catch (err) {
    logger.error(
      { err: { message: (err as Error).message }, code: 'CONTROL_LINK_LOCK_UNAVAILABLE' },
      'the control link lock (control-link.sqlite) cannot be opened: this process runs the control link without it; with ZENOVA_NODE_REPLICAS > 1 the replicas will replace each other\'s sessions until it is repaired',
    );
  }

  const becomeHolder = (why: string, from?: { pid: number }): void => {
    renewFailing = false;
    logger.info({ pid: process.pid, why, ...(from !== undefined ? { previousHolderPid: from.pid } : {}) }, 'this process holds the control link');
    loop = opts.startLink();
  };

  const loseHolder = async (holder: LockHolder): Promise<void> => {
    const current = loop;
    loop = undefined;
    const reason = { code: 'CONTROL_LINK_HANDED_OVER', message: `another node-edge process (pid ${holder.pid}) holds the control link now; this one follows it` };
    // /readyz reads this until the new holder's control-status.json is seen, even if no file can be written.
    followed = { connected: false, since: new Date(), problem: { code: reason.code, at: new Date() } };
    logger.warn({ pid: process.pid, holderPid: holder.pid }, 'another node-edge process holds the control link now; this one stops its link and follows');
    await current?.stop({ handedOver: reason });
  };

  /** Whether this process still holds the lock; a failed write alone never says it does not. */
  const stillHolder = (heldLock: ControlLinkLock): { held: true } | { held: false; holder: LockHolder } => {
    let failure: unknown;
    try {
      // The row is not this process's when renew changes nothing: take it back unless another live process holds it.
      const result = heldLock.renew() ? undefined : heldLock.tryAcquire();
      if (renewFailing) logger.info({ stateDir: opts.store.dir }, 'the control link lock can be renewed again');
      renewFailing = false;
      return result?.outcome === 'busy' ? { held: false, holder: result.holder } : { held: true };
    } catch (err) {
      failure = err;
    }
    if (!renewFailing) {
      const full = (failure as { code?: unknown }).code === 'SQLITE_FULL';
      logger.error(
        { err: { message: (failure as Error).message }, code: full ? 'STATE_DIR_FULL' : 'CONTROL_LINK_LOCK_FAILING', stateDir: opts.store.dir },
        full
          ? `the state dir's disk is full (${opts.store.dir}): the control link lock cannot be renewed; this process keeps the control link (no other process can take the lock while the disk is full) and tries again every ${intervalMs} ms: free space there`
          : `the control link lock in ${opts.store.dir} cannot be renewed; this process keeps the control link unless another process is seen holding it, and tries again every ${intervalMs} ms`,
      );
      renewFailing = true;
    }
    try {
      const other = heldLock.liveOtherHolder();
      return other === undefined ? { held: true } : { held: false, holder: other };
    } catch {
      // Unreadable too: no other process can take it either.
      return { held: true };
    }
  };

  const followTick = async (): Promise<void> => {
    try {
      await opts.follow?.();
    } catch (err) {
      logger.warn({ err: { message: (err as Error).message } }, 'could not follow the config the control link holder wrote');
    }
    try {
      const status = await loadControlStatus(opts.store);
      // This process's own file (its link stopped, no holder wrote since) is no other holder's link.
      if (status?.pid === process.pid) return;
      if (status !== undefined && status.serving && isProcessAlive(status.pid)) {
        const problem = currentProblem(status.connected, status.lastError);
        followed = { connected: status.connected, since: new Date(status.since), ...(problem !== undefined ? { problem } : {}) };
      }
      else followed = { connected: false, since: followed.connected ? new Date() : followed.since };
    } catch {
      // Mid-write or damaged: keep the last view.
    }
  };

  const tick = async (): Promise<void> => {
    if (lock === undefined || stopped) return;
    if (loop !== undefined) {
      const state = stillHolder(lock);
      if (!state.held) await loseHolder(state.holder);
      return;
    }
    let result;
    try {
      result = lock.tryAcquire();
      lockFailing = false;
    } catch (err) {
      if (!lockFailing) logger.warn({ err: { message: (err as Error).message } }, 'could not read the control link lock; trying again');
      lockFailing = true;
    }
    if (stopped) return;
    if (result !== undefined && result.outcome !== 'busy') {
      becomeHolder(result.outcome === 'acquired' ? result.why : 'held', result.outcome === 'acquired' ? result.tookOverFrom : undefined);
      return;
    }
    if (result?.outcome === 'busy' && followed.since === startedAt && !followed.connected) {
      logger.debug({ holderPid: result.holder.pid }, 'another node-edge process holds the control link; this one follows');
    }
    await followTick();
  };

  const schedule = (): void => {
    if (stopped) return;
    timer = setTimeout(() => {
      void tick()
        .catch((err: unknown) => logger.error({ err }, 'control link lock tick failed'))
        .finally(schedule);
    }, intervalMs);
    timer.unref();
  };

  if (lock === undefined) {
    loop = opts.startLink();
  } else {
    // The first try at once: a single process starts its link without delay.
    void tick()
      .catch((err: unknown) => logger.error({ err }, 'control link lock tick failed'))
      .finally(schedule);
  }

  return {
    isHolder: () => loop !== undefined,
    view() {
      if (loop === undefined) return followed;
      const link = loop.status();
      const connected = link.state === 'connected';
      const problem = currentProblem(connected, link.lastError);
      return { connected, since: link.since, ...(problem !== undefined ? { problem } : {}) };
    },
    configChanged: () => loop?.configChanged() ?? Promise.resolve(),
    async stop() {
      stopped = true;
      clearTimeout(timer);
      const current = loop;
      loop = undefined;
      await current?.stop();
      try {
        lock?.release();
      } catch (err) {
        logger.warn({ err: { message: (err as Error).message } }, 'could not release the control link lock; another replica takes it once it goes stale');
      }
      lock?.close();
    },
  };
}
