/**
 * `npm run bench:pipeline` (not a test; in one process; seconds): what the node's request pipeline
 * costs in CPU per request, without the network. The node's real app (buildApp) with the same
 * config as bench:gateway (a key with rate-limit policies on key and account, 7 guardrail rules,
 * one route), the real in-memory rate limiter, a real spool in a temp dir (group commit, no
 * backfill) and real metrics, driven through fastify's inject(); the upstream is replaced by a
 * canned answer (the one stand-in). Side by side in the same run: a bare fastify app that parses
 * the same body and answers the same canned JSON the same way (the baseline), so the difference
 * is the pipeline's own cost. Prints a table: µs of CPU per request and the ratio.
 *
 * Knobs (env): BENCH_REQUESTS per measurement (20000), BENCH_CONCURRENCY requests in flight (32),
 * BENCH_ROUNDS (3). Profile with `node --cpu-prof --import tsx test/bench/pipeline.ts`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import Fastify from 'fastify';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import type { RuntimeUpstream } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { createNodePipelineMetrics } from '../../edge-node/src/metrics/node-pipeline-metrics.js';
import { MemoryLimitStore } from '../../edge-node/src/rate-limit/memory-limit-store.js';
import { NodeRateLimiter } from '../../edge-node/src/rate-limit/node-rate-limiter.js';
import { createSpoolFile } from '../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../edge-node/src/spool/spool-store.js';
import type { UpstreamCall, UpstreamResponse } from '../../edge-node/src/upstream/upstream-pool.js';
import { UpstreamPool } from '../../edge-node/src/upstream/upstream-pool.js';
import { bundleKey, newCallerKey, testBundle } from '../edge-node/config-fixtures.js';
import { GENEROUS_LIMITS, GUARDRAIL_RULES, PROMPT } from './gateway-targets.js';

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 20_000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);


const ANSWER = JSON.stringify({
  id: 'chatcmpl-bench', object: 'chat.completion', created: 1_700_000_000, model: 'demo-echo',
  choices: [{ index: 0, message: { role: 'assistant', content: `Echo: ${PROMPT}`, refusal: null }, logprobs: null, finish_reason: 'stop' }],
  usage: { prompt_tokens: 18, completion_tokens: 20, total_tokens: 38 },
});
const BODY = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: PROMPT }] });

/** The upstream's answer without a network: what undici would hand over for a 200 JSON reply. */
function cannedResponse(): UpstreamResponse {
  return { statusCode: 200, headers: { 'content-type': 'application/json' }, body: Readable.from([Buffer.from(ANSWER)], { objectMode: false }) } as unknown as UpstreamResponse;
}

class CannedUpstreams extends UpstreamPool {
  override request(_upstream: RuntimeUpstream, _call: UpstreamCall): Promise<UpstreamResponse> {
    return Promise.resolve(cannedResponse());
  }
}

async function nodeApp(dir: string): Promise<{ app: FastifyInstance; headers: Record<string, string>; spool: SpoolStore; close: () => Promise<void> }> {
  const key = newCallerKey();
  const base = testBundle({ nodeId: 'bench-node', version: 1, upstreamUrl: 'http://127.0.0.1:9', keys: [] });
  const bundle = {
    ...base,
    accounts: [{ ...base.accounts[0]!, limits: GENEROUS_LIMITS }],
    apiKeys: [bundleKey('bench-key', key.sha256, { limits: GENEROUS_LIMITS, guardrailPolicyId: 'gp-1' })],
    guardrailPolicies: [{ id: 'gp-1', name: 'bench-guardrails', rules: GUARDRAIL_RULES.map((r) => ({ ...r })) }],
  } as typeof base;
  const holder = ConfigHolder.ready(fromBundle(bundle));
  const logger = createLogger({ level: 'info', destination: { write: () => undefined } });
  const file = path.join(dir, 'spool.db');
  const spool = new SpoolStore({ file, meta: createSpoolFile(file, 'bench-node'), logger, limits: () => ({ quotaBytes: 64 * 1024 ** 3, fullPolicy: 'reject' }) });
  const limiter = new NodeRateLimiter(new MemoryLimitStore(), logger);
  const metrics = createNodePipelineMetrics(() => ({ spoolBytes: spool.bytes(), backfillBacklog: spool.backlogCount() }));
  const app = await buildApp({ holder, logger, upstreams: new CannedUpstreams(), services: { nodeId: 'bench-node', spool, limiter, metrics } });
  await app.ready();
  return {
    app,
    headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' },
    spool,
    close: async () => {
      await app.close();
      await spool.close();
    },
  };
}

/** The baseline: fastify parsing the body, one "upstream" read of the canned answer, the answer sent. */
async function bareApp(): Promise<FastifyInstance> {
  const app = Fastify();
  app.post('/v1/chat/completions', async (request, reply) => {
    const upstream = cannedResponse();
    JSON.stringify(request.body);
    const chunks: Buffer[] = [];
    for await (const chunk of upstream.body) chunks.push(chunk as Buffer);
    return reply.code(200).header('content-type', 'application/json').send(JSON.parse(Buffer.concat(chunks).toString('utf8')));
  });
  await app.ready();
  return app;
}

/** CPU µs per request over REQUESTS injects, CONCURRENCY at a time; throws on any non-200. */
async function measure(app: FastifyInstance, headers: Record<string, string>): Promise<number> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < REQUESTS) {
      next += 1;
      const res = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers, payload: BODY });
      if (res.statusCode !== 200) throw new Error(`answered ${res.statusCode}: ${res.body.slice(0, 300)}`);
    }
  };
  const before = process.cpuUsage();
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const used = process.cpuUsage(before);
  return (used.user + used.system) / REQUESTS;
}

const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-bench-pipeline-'));
try {
  const node = await nodeApp(dir);
  const commitsBefore = node.spool.commitCount();
  const bare = await bareApp();
  const bareHeaders = { 'content-type': 'application/json' };
  // Warm-up: JIT and caches for both.
  await measure(bare, bareHeaders);
  await measure(node.app, node.headers);
  const results = { bare: [] as number[], node: [] as number[] };
  for (let round = 0; round < ROUNDS; round++) {
    results.bare.push(await measure(bare, bareHeaders));
    results.node.push(await measure(node.app, node.headers));
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const [b, n] = [median(results.bare), median(results.node)];
  process.stdout.write(
    `machine: ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown CPU'}, Node ${process.version}; ${ROUNDS} rounds × ${REQUESTS} requests, ${CONCURRENCY} in flight, median round\n\n` +
      '| app | CPU µs/request | ÷ bare |\n|---|---:|---:|\n' +
      `| bare fastify (parse, read the canned answer, send it) | ${b.toFixed(1)} | 1.00 |\n` +
      `| node pipeline (auth, limits, 7 guardrail rules × 2, route, spool, metrics, log line) | ${n.toFixed(1)} | ${(n / b).toFixed(2)} |\n\n` +
      `the pipeline's own cost: ${(n - b).toFixed(1)} µs of CPU per request (${((node.spool.commitCount() - commitsBefore) / ((ROUNDS + 1) * REQUESTS)).toFixed(2)} spool commits per request: inject runs many requests per event-loop turn, so the spool batches far more than behind real sockets)\n`,
  );
  await bare.close();
  await node.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
