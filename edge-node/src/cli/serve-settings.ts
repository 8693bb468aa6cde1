/**
 * The settings `zenova-node serve` takes from the environment (docs/node-api.md, "Node settings"),
 * all read before anything is opened: a bad value is one line naming the variable and what it
 * accepts (exit 2), not an unexpected failure after the spool was opened, nor a typo quietly
 * taken as the default.
 */
import type { LevelWithSilent } from 'pino';
import { NUMBER_SHAPE, givenValue } from '../../../proto/src/cli-usage-errors.js';
import { DEFAULT_CREDIT_POLICY } from '../billing/credit-policy.js';
import type { CreditPolicy } from '../billing/credit-policy.js';
import { reconnectSettingsFromEnv } from '../control/reconnect-settings.js';
import type { ReconnectSettings } from '../control/reconnect-settings.js';
import { replicasFor } from '../rate-limit/create-node-rate-limiter.js';
import type { SpoolSynchronous } from '../spool/spool-store.js';

/** A setting `serve` refuses at start-up; the message names the variable and the accepted values. */
export class ServeSettingError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ServeSettingError';
  }
}

export interface ServeSettings {
  /** ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS, ZENOVA_LEASE_REPORT_MS. */
  credit: CreditPolicy;
  /** ZENOVA_SPOOL_SYNCHRONOUS. */
  spoolSynchronous: SpoolSynchronous;
  /** ZENOVA_NODE_LINK_LOCK_INTERVAL_MS; undefined leaves the control link lock's default. */
  linkLockIntervalMs: number | undefined;
  /** ZENOVA_NODE_RECONNECT_*, ZENOVA_NODE_REFUSED_RETRY_MS; only an enrolled node has a control link. */
  reconnect: ReconnectSettings | undefined;
  /**
   * ZENOVA_NODE_SHUTDOWN_DRAIN_MS: how long requests may run on after a stop signal; undefined
   * leaves serve's default. At most 20 s: the unit's TimeoutStopSec (30 s) must also cover ending
   * the rest, returning credit and closing the spool.
   */
  shutdownDrainMs: number | undefined;
}

/** The shape of a word setting's value that a message may name back (an env file line may hold a pasted token). */
const WORD_SHAPE = /^[A-Za-z]{1,16}$/;

function wholeNumber(env: NodeJS.ProcessEnv, name: string, min: number, max: number): number | undefined {
  const raw = env[name];
  // Empty counts as unset: env files often carry `NAME=` for "not configured".
  if (raw === undefined || raw === '') return undefined;
  if (!/^\d{1,10}$/.test(raw) || Number(raw) < min || Number(raw) > max) {
    throw new ServeSettingError(`${name} must be a whole number from ${min} to ${max}, ${givenValue(raw, NUMBER_SHAPE, 'a number')}`);
  }
  return Number(raw);
}

function spoolSynchronous(env: NodeJS.ProcessEnv): SpoolSynchronous {
  const raw = env.ZENOVA_SPOOL_SYNCHRONOUS;
  if (raw === undefined || raw === '') return 'normal';
  const value = raw.toLowerCase();
  if (value === 'normal' || value === 'full') return value;
  throw new ServeSettingError(`ZENOVA_SPOOL_SYNCHRONOUS must be normal or full, ${givenValue(raw, WORD_SHAPE, 'a word')}`);
}

/** ZENOVA_LOG_LEVEL's values: the control plane's (control-plane/src/logger.ts LOG_LEVELS), in the same order. */
export const NODE_LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const satisfies readonly LevelWithSilent[];

/**
 * ZENOVA_LOG_LEVEL (any case; unset or empty: info), as the control plane reads it. Read before
 * the logger exists (run-cli.ts), so a typo is refused rather than hiding the lines asked for.
 */
export function readLogLevel(env: NodeJS.ProcessEnv): LevelWithSilent {
  const raw = env.ZENOVA_LOG_LEVEL;
  if (raw === undefined || raw === '') return 'info';
  const level = NODE_LOG_LEVELS.find((l) => l === raw.toLowerCase());
  if (level !== undefined) return level;
  throw new ServeSettingError(`ZENOVA_LOG_LEVEL must be one of ${NODE_LOG_LEVELS.join(', ')}, ${givenValue(raw, WORD_SHAPE, 'a word')}`);
}

export function readServeSettings(env: NodeJS.ProcessEnv, opts: { enrolled: boolean }): ServeSettings {
  // Checked here for its one-line refusal before anything opens; the rate limiter reads it again.
  replicasFor(env, opts.enrolled);
  return {
    credit: {
      defaultMaxOutputTokens: wholeNumber(env, 'ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS', 1, 1_000_000) ?? DEFAULT_CREDIT_POLICY.defaultMaxOutputTokens,
      reportIntervalMs: wholeNumber(env, 'ZENOVA_LEASE_REPORT_MS', 1, 3_600_000) ?? DEFAULT_CREDIT_POLICY.reportIntervalMs,
    },
    spoolSynchronous: spoolSynchronous(env),
    linkLockIntervalMs: wholeNumber(env, 'ZENOVA_NODE_LINK_LOCK_INTERVAL_MS', 50, 60_000),
    reconnect: opts.enrolled ? reconnectSettingsFromEnv(env) : undefined,
    shutdownDrainMs: wholeNumber(env, 'ZENOVA_NODE_SHUTDOWN_DRAIN_MS', 0, 20_000),
  };
}
