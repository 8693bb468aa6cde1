/**
 * Checkpoints a WAL-mode SQLite file from a worker thread, so the checkpoint's page copying and
 * fsync never run on the event loop. SQLite's automatic checkpoint runs inside whichever commit
 * crosses 1000 WAL pages: with a commit per request that was a 5–15 ms stall of the whole event
 * loop every few hundred requests, the largest part of the node's p99 latency. The owner turns
 * autocheckpoint off on its own connection (`wal_autocheckpoint = 0`) and keeps one of these.
 *
 * PASSIVE checkpoints never wait for (or block) the writer; a checkpoint that finds the whole WAL
 * copied lets the next commit start the WAL from the beginning again, so it stays small. The
 * worker is inline CommonJS (eval) requiring better-sqlite3 by its resolved path, so it runs the
 * same under tsx and in the esbuild bundle of the package.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { Logger } from '../logger.js';

/** How often the worker checkpoints. */
export const DEFAULT_CHECKPOINT_INTERVAL_MS = 200;

const WORKER_SOURCE = `
const { workerData, parentPort } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.file, { fileMustExist: true });
db.pragma('busy_timeout = 1000');
// Its checkpoints sync the WAL before copying it and the database after (OFF would sync neither).
db.pragma('synchronous = NORMAL');
let failures = 0;
const durableQuery = workerData.durableQuery ? db.prepare(workerData.durableQuery).pluck() : undefined;
let lastDurable;
const timer = setInterval(() => {
  try {
    // Read before the checkpoint: a checkpoint that then copies the whole WAL (log = checkpointed)
    // has synced every commit this read saw (or a checkpoint before it did, if the WAL restarted).
    const value = durableQuery ? durableQuery.get() : undefined;
    const [result] = db.pragma('wal_checkpoint(PASSIVE)');
    failures = 0;
    if (durableQuery && result && result.busy === 0 && result.log === result.checkpointed && value !== lastDurable) {
      lastDurable = value;
      parentPort.postMessage({ durable: value });
    }
  } catch (err) {
    // SQLITE_BUSY and friends: the next tick tries again; only a persistent failure is reported.
    failures += 1;
    if (failures === 10) parentPort.postMessage({ failing: String(err && err.message) });
  }
}, workerData.intervalMs);
parentPort.on('message', (m) => {
  if (m !== 'stop') return;
  clearInterval(timer);
  try { db.close(); } catch {}
  parentPort.postMessage({ stopped: true });
});
`;

/**
 * A value read from the file that is known durable (synced to the database file, so neither a kill
 * -9 nor a power loss takes it back): `query` (one value) is read before each checkpoint, and
 * `onDurable` gets it when that checkpoint copied the whole WAL and the value changed.
 */
export interface DurableValueWatch {
  query: string;
  onDurable: (value: unknown) => void;
}

export class WalCheckpointer {
  private readonly worker: Worker;
  private exited = false;
  private stopping: Promise<void> | undefined;

  constructor(file: string, logger: Logger, intervalMs = DEFAULT_CHECKPOINT_INTERVAL_MS, durable?: DurableValueWatch) {
    const driver = createRequire(import.meta.url).resolve('better-sqlite3');
    this.worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { file, intervalMs, driver, durableQuery: durable?.query } });
    // Never keeps the process alive on its own.
    this.worker.unref();
    this.worker.on('message', (m: { failing?: string; durable?: unknown }) => {
      if (m.failing !== undefined) logger.warn({ file, message: m.failing }, 'WAL checkpoints keep failing; the file grows until they succeed');
      if ('durable' in m) durable?.onDurable(m.durable);
    });
    this.worker.on('error', (err) => logger.warn({ file, message: err.message }, 'the WAL checkpoint worker stopped'));
    this.worker.once('exit', () => {
      this.exited = true;
    });
  }

  /** Stops checkpointing and closes the worker's connection (before the owner closes its own). */
  stop(): Promise<void> {
    this.stopping ??= new Promise<void>((resolve) => {
      if (this.exited) {
        resolve();
        return;
      }
      const done = (): void => {
        void this.worker.terminate().finally(resolve);
      };
      this.worker.once('exit', () => resolve());
      this.worker.once('message', done);
      this.worker.postMessage('stop');
      // A worker that cannot answer (crashed) must not hold shutdown.
      setTimeout(done, 2000).unref();
    });
    return this.stopping;
  }
}
