/**
 * The three things `bench:gateway` measures, each started as its own process on 127.0.0.1 and
 * all pointed at one upstream process: the upstream itself (direct), an enrolled node serving the
 * full pipeline, and the peer gateway (@portkey-ai/gateway from node_modules).
 *
 * The node is real end to end: PostgreSQL, a control plane configured through its admin API (an
 * account and a key with generous rate-limit policies, a guardrail policy with a few rules, a
 * route), then `zenova-node enroll` and `serve` into a state dir (so the spool is on). Its stdout
 * goes to a file, as it would go to journald, so the load generator never pays to read its logs.
 */
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { bundleApps } from '../../packaging/bundle-apps.js';
import { startPostgres } from '../fixtures/postgres.js';
import { REPO_ROOT, startProcess, tsEntry } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { enrollNewNode, freePort, httpsMaterial, startControlPlane, UPSTREAM_SECRET } from '../e2e/stack.js';
import type { ControlPlane } from '../e2e/stack.js';
import type { BenchTarget } from './gateway-load.js';
import type { GatewayRuntime } from './gateway-runtime.js';

/** Collects clean-ups (the fixtures take a tap-like `t`), run newest first. */
export class Teardowns {
  private readonly fns: Array<() => unknown> = [];
  teardown(fn: () => unknown): void {
    this.fns.push(fn);
  }
  async run(): Promise<void> {
    for (const fn of this.fns.reverse()) {
      try {
        await fn();
      } catch (err) {
        process.stderr.write(`teardown: ${(err as Error).message}\n`);
      }
    }
  }
}

/** The one request every target gets: a short, non-streaming chat completion no guardrail rule matches. */
export const PROMPT = 'Summarise the attached quarterly figures for the sales team in two sentences.';
const chatBody = (model: string): string => JSON.stringify({ model, messages: [{ role: 'user', content: PROMPT }] });

export interface Upstream {
  url: string;
  port: number;
  pid: number | undefined;
}

export async function startUpstream(t: Teardowns): Promise<Upstream> {
  const { command, args } = tsEntry('test/bench/gateway-upstream-main.ts');
  const proc = await startProcess({ name: 'bench upstream', command, args, readyLine: /bench upstream listening/, t });
  const line = JSON.parse(await proc.waitForLine(/bench upstream listening/)) as { url: string; port: number };
  return { url: line.url, port: line.port, pid: proc.child.pid };
}

export function directTarget(upstream: Upstream): BenchTarget {
  return {
    name: 'direct',
    origin: `http://127.0.0.1:${upstream.port}`,
    path: '/v1/chat/completions',
    headers: { authorization: `Bearer ${UPSTREAM_SECRET}`, 'content-type': 'application/json' },
    body: chatBody('demo-echo'),
    pid: upstream.pid,
  };
}

/** The `floor` target (gateway-floor-main.ts): a bare fastify + undici pass-through to the upstream. */
export async function startFloor(t: Teardowns, upstream: Upstream, runtime: GatewayRuntime): Promise<BenchTarget> {
  const { args } = tsEntry('test/bench/gateway-floor-main.ts');
  const proc = await startProcess({ name: 'bench floor proxy', command: runtime.binary, args: [...args, `http://127.0.0.1:${upstream.port}`], readyLine: /bench floor listening/, t });
  const line = JSON.parse(await proc.waitForLine(/bench floor listening/)) as { port: number };
  return { ...directTarget(upstream), name: 'floor', origin: `http://127.0.0.1:${line.port}`, pid: proc.child.pid };
}

/** Limits far above anything the bench offers, so they are evaluated on every request but never refuse. */
export const GENEROUS_LIMITS = { requestsPerMinute: 10_000_000, tokensPerMinute: 10_000_000_000, concurrentRequests: 100_000 };

/** A few rules of each kind, on input and output; none matches PROMPT or the echoed answer. */
export const GUARDRAIL_RULES = [
  { detector: 'email', action: 'mask', on: 'both' },
  { detector: 'phone', action: 'mask', on: 'both' },
  { detector: 'prc-resident-id', action: 'block', on: 'input' },
  { detector: 'bank-card', action: 'block', on: 'both' },
  { detector: 'secret', action: 'block', on: 'both' },
  { detector: 'keywords', keywords: ['project nightingale', 'internal only', 'do not distribute'], action: 'flag', on: 'both' },
  { detector: 'regex', pattern: '\\bACCT-\\d{6,}\\b', action: 'mask', on: 'both' },
] as const;

async function configureNodeConfig(cp: ControlPlane, upstream: Upstream): Promise<{ apiKey: string }> {
  const must = async (path: string, body: unknown): Promise<Record<string, unknown>> => {
    const res = await cp.api<Record<string, unknown>>('POST', path, body);
    if (res.status !== 201) throw new Error(`POST ${path}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  };
  await must('/api/v1/rate-limit-policies', { name: 'bench-account-limits', ...GENEROUS_LIMITS });
  await must('/api/v1/rate-limit-policies', { name: 'bench-key-limits', ...GENEROUS_LIMITS });
  await must('/api/v1/guardrail-policies', { name: 'bench-guardrails', rules: GUARDRAIL_RULES });
  await must('/api/v1/accounts', { name: 'bench', rateLimitPolicy: 'bench-account-limits' });
  await must('/api/v1/upstreams', { name: 'fake', kind: 'openai-compatible', baseUrl: upstream.url, apiKey: UPSTREAM_SECRET });
  await must('/api/v1/routes', { alias: 'echo', targets: [{ upstream: 'fake', model: 'demo-echo' }] });
  const key = (await must('/api/v1/api-keys', {
    account: 'bench', name: 'bench-key', rateLimitPolicy: 'bench-key-limits', guardrailPolicy: 'bench-guardrails',
  })) as { secret: string };
  return { apiKey: key.secret };
}

export interface NodeUnderTest {
  target: BenchTarget;
  pid: number;
  /** The node's 127.0.0.1 admin port (Prometheus text at /metrics), when it opened one. */
  adminUrl: string | undefined;
  logFile: string;
}

/**
 * The node daemon as the package ships it: the esbuild bundle (packaging/bundle-apps.ts), not the
 * sources through tsx (whose transform adds work to every closure on the hot path), written where
 * the runtime's node_modules (better-sqlite3) and package.json are (gateway-runtime.ts).
 */
async function nodeBundle(runtime: GatewayRuntime): Promise<string> {
  const { node } = await bundleApps(REPO_ROOT);
  const file = runtime.nodeBundleFile;
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, node.contents);
  return file;
}

/** `serve` as a child with stdout+stderr appended to `logFile`; ready when the file shows the line. */
async function serveNode(t: Teardowns, runtime: GatewayRuntime, stateDir: string, logFile: string, adminPort: number, extraNodeArgs: string[]): Promise<{ url: string; pid: number }> {
  const entry = await nodeBundle(runtime);
  const fd = openSync(logFile, 'a');
  const child = spawn(runtime.binary, [...extraNodeArgs, entry, 'serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0'], {
    stdio: ['ignore', fd, fd],
    env: { ...process.env, ZENOVA_NODE_ADMIN_LISTEN: `127.0.0.1:${adminPort}` },
  });
  closeSync(fd);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const late = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(late);
    }
  });
  const lines = (): string[] => readFileSync(logFile, 'utf8').split('\n');
  // A probe that sees the child gone answers at once (waitFor would retry a throwing probe until its deadline).
  const untilLine = async (needle: string, what: string, timeoutMs: number): Promise<string> => {
    const found = await waitFor(() => (child.exitCode !== null || child.signalCode !== null ? { exited: true as const } : lines().find((l) => l.includes(needle))), { timeoutMs, intervalMs: 100, what });
    if (typeof found !== 'string') throw new Error(`node serve exited (${child.exitCode ?? child.signalCode}) while waiting for ${what}; log:\n${lines().slice(-30).join('\n')}`);
    return found;
  };
  const listening = await untilLine('"msg":"node-edge listening"', 'the node to listen', 60_000);
  await untilLine('"msg":"config applied"', 'the node to apply its config', 30_000);
  const { url } = JSON.parse(listening) as { url: string };
  return { url, pid: child.pid ?? 0 };
}

/**
 * PostgreSQL, a configured control plane, and an enrolled serving node. `nodeArgs` go before the
 * node's entry script (e.g. `--cpu-prof`), `controlPlaneArgs` before the control plane's.
 */
export async function startNode(t: Teardowns, upstream: Upstream, workDir: string, runtime: GatewayRuntime, nodeArgs: string[] = [], controlPlaneArgs: string[] = []): Promise<NodeUnderTest> {
  const db = await startPostgres();
  t.teardown(() => db.stop());
  const https = await httpsMaterial(join(workDir, 'https'));
  // Production heartbeat and offline settings, not the e2e tests' fast ones.
  const cp = await startControlPlane(t, {
    db, https, gatewayTlsDir: join(workDir, 'gw'), gatewayPort: await freePort(), listenPort: await freePort(),
    env: { ZENOVA_HEARTBEAT_INTERVAL_MS: '5000', ZENOVA_NODE_OFFLINE_AFTER_SECONDS: '120' },
    nodeArgs: controlPlaneArgs,
  });
  const { apiKey } = await configureNodeConfig(cp, upstream);
  const stateDir = join(workDir, 'state');
  await enrollNewNode(t, cp, 'bench-node', stateDir);
  const adminPort = await freePort();
  const logFile = join(workDir, 'node.log');
  const { url, pid } = await serveNode(t, runtime, stateDir, logFile, adminPort, nodeArgs);
  const origin = new URL(url).origin;
  return {
    target: {
      name: 'node',
      origin,
      path: '/v1/chat/completions',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: chatBody('echo'),
      pid,
    },
    pid,
    adminUrl: `http://127.0.0.1:${adminPort}`,
    logFile,
  };
}

/** @portkey-ai/gateway's own Node server (`build/start-server.js`), headless, on a free port. */
export async function startPeer(t: Teardowns, upstream: Upstream, runtime: GatewayRuntime): Promise<BenchTarget> {
  const script = createRequire(import.meta.url).resolve('@portkey-ai/gateway/build/start-server.js');
  const port = await freePort();
  const proc = await startProcess({
    name: 'portkey gateway',
    command: runtime.binary,
    args: [script, `--port=${port}`, '--headless'],
    readyLine: /Ready for connections/,
    timeoutMs: 30_000,
    t,
  });
  return {
    name: 'peer',
    origin: `http://127.0.0.1:${port}`,
    path: '/v1/chat/completions',
    headers: {
      authorization: `Bearer ${UPSTREAM_SECRET}`,
      'content-type': 'application/json',
      // Portkey's per-request provider config: OpenAI wire format, at our upstream's address.
      'x-portkey-provider': 'openai',
      'x-portkey-custom-host': upstream.url,
    },
    body: chatBody('demo-echo'),
    pid: proc.child.pid,
  };
}
