// Starts the node app on a real socket (127.0.0.1:0) for tests, with its log lines captured.
import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { parseLocalConfig } from '../../edge-node/src/config/local-config.js';
import type { LocalConfig } from '../../edge-node/src/config/local-config.js';
import { fromLocalConfig } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import type { Clock } from '../../edge-node/src/pipeline/clock.js';

export const CALLER_KEY = 'zk-test-caller-key-0123456789abcdef';
export const OTHER_CALLER_KEY = 'zk-test-second-caller-key-fedcba9876';
export const UPSTREAM_KEY = 'sk-upstream-secret-key-for-tests-42';

export function sha256hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** A config with one upstream at `upstreamUrl`, the alias `echo` for demo-echo, and two caller keys. */
export function testConfig(upstreamUrl: string, overrides: Partial<LocalConfig> = {}): LocalConfig {
  return parseLocalConfig({
    node: { name: 'test-node' },
    upstreams: [{ name: 'demo', kind: 'openai-compatible', baseUrl: upstreamUrl, apiKey: UPSTREAM_KEY, timeoutMs: 30_000 }],
    models: [
      { id: 'echo', upstream: 'demo', upstreamModel: 'demo-echo' },
      { id: 'echo-2', upstream: 'demo', upstreamModel: 'demo-echo' },
    ],
    apiKeys: [
      { id: 'key-a', sha256: sha256hex(CALLER_KEY), name: 'caller A' },
      { id: 'key-b', sha256: sha256hex(OTHER_CALLER_KEY).toUpperCase() },
    ],
    ...overrides,
  });
}

export interface RunningNode {
  app: FastifyInstance;
  /** The config the node serves; tests swap configs through it. */
  holder: ConfigHolder;
  /** Base URL ending in /v1, as callers configure it. */
  baseURL: string;
  origin: string;
  logLines: string[];
  logs(): Array<Record<string, unknown>>;
  client(opts?: { apiKey?: string }): OpenAI;
}

/** Listens on 127.0.0.1:0 until the test ends; the origin and the OpenAI Base URL (`…/v1`). */
export async function listenOnLoopback(t: { teardown(fn: () => unknown): void }, app: FastifyInstance): Promise<{ origin: string; baseURL: string }> {
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const { port } = app.server.address() as AddressInfo;
  const origin = `http://127.0.0.1:${port}`;
  return { origin, baseURL: `${origin}/v1` };
}

/** The node app on 127.0.0.1:0, serving a local config or whatever `holder` holds. */
export async function startNode(t: { teardown(fn: () => unknown): void }, config: LocalConfig | ConfigHolder, opts: { clock?: Clock } = {}): Promise<RunningNode> {
  const logLines: string[] = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void logLines.push(line) } });
  const holder = config instanceof ConfigHolder ? config : ConfigHolder.ready(fromLocalConfig(config));
  const current = holder.current();
  const app = await buildApp({ holder, logger, ...(current.ready ? { maxBodyBytes: current.config.maxBodyBytes } : {}), ...(opts.clock !== undefined ? { clock: opts.clock } : {}) });
  const { origin, baseURL } = await listenOnLoopback(t, app);
  return {
    app,
    holder,
    baseURL,
    origin,
    logLines,
    logs: () => logLines.map((line) => JSON.parse(line) as Record<string, unknown>),
    // No SDK retries: each test call is exactly one request to the node.
    client: (opts = {}) => new OpenAI({ baseURL, apiKey: opts.apiKey ?? CALLER_KEY, maxRetries: 0, timeout: 20_000 }),
  };
}
