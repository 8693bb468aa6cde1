// The node's rate limiter. One node-edge process per node (ZENOVA_NODE_REPLICAS unset or 1) keeps
// its counters in memory: the limits are node-wide already (a second process on the state dir at 1
// is refused at start: open-node-spool.ts), and a SQLite transaction per admit would be most of the
// pipeline's cost (docs/performance.md). Several replicas sharing one state dir
// share counters in a SQLite file there, so the limits hold across them.
import path from 'node:path';
import { givenValue, NUMBER_SHAPE } from '../../../proto/src/cli-usage-errors.js';
import type { Logger } from '../logger.js';
import { systemClock } from '../pipeline/clock.js';
import type { Clock } from '../pipeline/clock.js';
import type { LimitStore } from './limit-store.js';
import { MemoryLimitStore } from './memory-limit-store.js';
import { NodeRateLimiter } from './node-rate-limiter.js';
import type { RateLimiter } from './rate-limiter.js';
import { RATE_LIMIT_FILE, SqliteLimitStore } from './sqlite-limit-store.js';

export interface NodeRateLimiterOptions {
  /** Where replicas share their counters; undefined in stand-alone mode (in-process counters). */
  stateDir: string | undefined;
  logger: Logger;
  env: NodeJS.ProcessEnv;
  /** For the replica lease (requests use their own ctx.clock). */
  clock?: Clock;
}

/** Refused at start-up (a bad ZENOVA_NODE_REPLICAS). */
export class ReplicaSettingError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ReplicaSettingError';
  }
}

/** ZENOVA_NODE_REPLICAS: how many node-edge processes serve this node from one state dir (default 1). */
export function replicasFromEnv(env: NodeJS.ProcessEnv): number {
  const raw = env.ZENOVA_NODE_REPLICAS;
  if (raw === undefined || raw === '') return 1;
  if (!/^[0-9]{1,3}$/.test(raw) || Number(raw) < 1) {
    // Named back only when it looks like a number: a pasted secret must not reach the journal.
    throw new ReplicaSettingError(`ZENOVA_NODE_REPLICAS must be a whole number from 1 to 999, ${givenValue(raw, NUMBER_SHAPE, 'a number')}`);
  }
  return Number(raw);
}

/**
 * ZENOVA_NODE_REPLICAS as a node with (or without) a state dir can honour it: above 1 needs one,
 * where the replicas share their counters (each process would otherwise keep its own: N replicas,
 * N times the limits). `serve` calls this before it opens anything, for a one-line refusal.
 */
export function replicasFor(env: NodeJS.ProcessEnv, hasStateDir: boolean): number {
  const replicas = replicasFromEnv(env);
  if (replicas > 1 && !hasStateDir) {
    throw new ReplicaSettingError(
      `ZENOVA_NODE_REPLICAS=${replicas} needs a state dir (--state-dir): replicas share their rate-limit counters there; ` +
        'a stand-alone node (--config) runs as one process, so leave ZENOVA_NODE_REPLICAS unset or 1',
    );
  }
  return replicas;
}

export async function createNodeRateLimiter(opts: NodeRateLimiterOptions): Promise<RateLimiter> {
  const replicas = replicasFor(opts.env, opts.stateDir !== undefined);
  const store = replicas > 1 ? openSharedStore(opts.stateDir!, replicas, opts) : new MemoryLimitStore();
  return new NodeRateLimiter(store, opts.logger);
}

/**
 * The replicas' shared file. One that cannot be opened nor made anew (a damaged one is: rate-limit-file.ts)
 * must not stop the node from serving, nor restart-loop it: this replica then counts in memory.
 */
function openSharedStore(stateDir: string, replicas: number, opts: NodeRateLimiterOptions): LimitStore {
  try {
    return new SqliteLimitStore({ location: stateDir, clock: opts.clock ?? systemClock, logger: opts.logger });
  } catch (err) {
    const file = path.join(stateDir, RATE_LIMIT_FILE);
    opts.logger.error(
      { err, file },
      `${file} could not be opened nor made anew: this replica keeps its rate-limit counters in memory, so each of the ${replicas} replicas enforces every limit on its own (up to ${replicas} times the limits node-wide) until it restarts with a usable file; check the state dir's permissions and free space`,
    );
    return new MemoryLimitStore();
  }
}
