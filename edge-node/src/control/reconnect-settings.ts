/**
 * Reconnect timings from the environment (defaults suit production; tests shorten them). Bad values
 * stop start-up with a message naming the variable, and the value only when it looks like a number
 * (an env file line may hold a token pasted in the wrong place).
 */
import { z } from 'zod';
import { NUMBER_SHAPE, givenValue } from '../../../proto/src/cli-usage-errors.js';
import { DEFAULT_RECONNECT_BASE_MS, DEFAULT_RECONNECT_MAX_MS, DEFAULT_REFUSED_RETRY_MS } from './connect-loop.js';

export interface ReconnectSettings {
  reconnect: { baseMs: number; maxMs: number };
  refusedRetryMs: number;
}

export class ReconnectSettingsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ReconnectSettingsError';
  }
}

const milliseconds = z.coerce.number().int().min(1).max(24 * 60 * 60_000);

function read(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const parsed = milliseconds.safeParse(raw);
  if (!parsed.success) throw new ReconnectSettingsError(`${name} must be a whole number of milliseconds from 1 to 86400000, ${givenValue(raw, NUMBER_SHAPE, 'a number')}`);
  return parsed.data;
}

export function reconnectSettingsFromEnv(env: NodeJS.ProcessEnv): ReconnectSettings {
  const baseMs = read(env, 'ZENOVA_NODE_RECONNECT_BASE_MS', DEFAULT_RECONNECT_BASE_MS);
  const maxMs = read(env, 'ZENOVA_NODE_RECONNECT_MAX_MS', Math.max(DEFAULT_RECONNECT_MAX_MS, baseMs));
  if (maxMs < baseMs) throw new ReconnectSettingsError(`ZENOVA_NODE_RECONNECT_MAX_MS (${maxMs}) must not be below ZENOVA_NODE_RECONNECT_BASE_MS (${baseMs})`);
  return { reconnect: { baseMs, maxMs }, refusedRetryMs: read(env, 'ZENOVA_NODE_REFUSED_RETRY_MS', DEFAULT_REFUSED_RETRY_MS) };
}
