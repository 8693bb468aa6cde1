// A node app built from a signed-bundle config (keys, accounts, routes as the control plane ships
// them) on 127.0.0.1:0, with recording pipeline services so tests can see what each request did.
import OpenAI from 'openai';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../../edge-node/src/app.js';
import type { PipelineServices } from '../../../edge-node/src/cli/node-services.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import type { ConfigBundle } from '../../../proto/src/index.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';
import { listenOnLoopback } from '../node-harness.js';

export interface FinishedRequest {
  requestId: string;
  outcome: PipelineContext['outcome'];
  usage: PipelineContext['usage'];
  attempts: PipelineContext['attempts'];
  stages: string[];
}

export interface PipelineNode {
  app: FastifyInstance;
  baseURL: string;
  origin: string;
  /** The caller key of `key-a` (active, account acct-1, every model). */
  secret: string;
  /** Every finished request as the metrics saw it, in order. */
  finished: FinishedRequest[];
  logs(): Array<Record<string, unknown>>;
  logText(): string;
  client(opts?: { apiKey?: string }): OpenAI;
}

/** Metrics that keep what each finished request learnt (stages that ran, outcome, usage). */
export function recordingMetrics(into: FinishedRequest[]): PipelineServices['metrics'] {
  return {
    requestFinished(ctx: PipelineContext): void {
      into.push({
        requestId: ctx.requestId,
        outcome: { ...ctx.outcome },
        usage: { ...ctx.usage },
        attempts: [...ctx.attempts],
        stages: Object.keys(ctx.stagesUs),
      });
    },
  };
}

export async function startPipelineNode(
  t: { teardown(fn: () => unknown): void },
  opts: {
    upstreamUrl: string;
    bundle?: (base: ConfigBundle, keyHash: string) => Partial<ConfigBundle>;
    services?: Partial<PipelineServices>;
    maxBodyBytes?: number;
    requestTimeoutMs?: number;
    callerStallMs?: number;
  },
): Promise<PipelineNode> {
  const key = newCallerKey();
  const base = testBundle({ nodeId: 'node-1', version: 1, upstreamUrl: opts.upstreamUrl, keys: [bundleKey('key-a', key.sha256)] });
  const bundle: ConfigBundle = { ...base, ...opts.bundle?.(base, key.sha256) };
  const holder = ConfigHolder.ready(fromBundle(bundle));
  const logLines: string[] = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void logLines.push(line) } });
  const finished: FinishedRequest[] = [];
  const app = await buildApp({
    holder,
    logger,
    services: { metrics: recordingMetrics(finished), ...opts.services },
    ...(opts.maxBodyBytes !== undefined ? { maxBodyBytes: opts.maxBodyBytes } : {}),
    ...(opts.requestTimeoutMs !== undefined ? { requestTimeoutMs: opts.requestTimeoutMs } : {}),
    ...(opts.callerStallMs !== undefined ? { callerStallMs: opts.callerStallMs } : {}),
  });
  const { origin, baseURL } = await listenOnLoopback(t, app);
  return {
    app,
    baseURL,
    origin,
    secret: key.secret,
    finished,
    logs: () => logLines.map((line) => JSON.parse(line) as Record<string, unknown>),
    logText: () => logLines.join('\n'),
    // No SDK retries: each call is exactly one request to the node.
    client: (o = {}) => new OpenAI({ baseURL, apiKey: o.apiKey ?? key.secret, maxRetries: 0, timeout: 20_000 }),
  };
}

/** The error an SDK call failed with (it must fail). */
export async function sdkError(promise: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof OpenAI.APIError) return err;
    throw err;
  }
  throw new Error('expected the call to fail with an APIError');
}

/**
 * The alias `claude` routed to an anthropic upstream at `anthropicUrl` (as model `claude-real`),
 * added to `base`'s upstreams and routes: spread into a `bundle` override.
 */
export function withClaudeRoute(base: ConfigBundle, anthropicUrl: string, upstreamName = 'claude'): Pick<ConfigBundle, 'upstreams' | 'routes'> {
  return {
    upstreams: [...base.upstreams, { id: `up-${upstreamName}`, name: upstreamName, kind: 'anthropic', baseUrl: anthropicUrl, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 30_000 }],
    routes: [...base.routes, { alias: 'claude', targets: [{ upstream: upstreamName, model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 }],
  };
}
