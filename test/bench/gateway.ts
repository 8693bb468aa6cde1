/**
 * `npm run bench:gateway` (not a test; loopback only; a few minutes): the same non-streaming chat
 * completion sent (a) straight to the fake upstream, (b) through an enrolled node with the full
 * pipeline (auth, rate limits, guardrails, spool), and (c) through the peer gateway
 * @portkey-ai/gateway pointed at the same upstream. Loads: closed-loop at 32 connections, and
 * open-loop at 200/s and 500/s (latency from each request's scheduled send time). Targets alternate
 * within every round so drift on a noisy machine hits all three alike. Prints a markdown table
 * (copied into docs/performance.md), the issue's targets met or missed, and the node's own
 * per-stage times from its admin port so a miss says where the time went.
 *
 * Knobs (env): BENCH_SECONDS per measurement (6), BENCH_ROUNDS (2), BENCH_WARMUP_SECONDS (4),
 * BENCH_NODE_ARGS extra node flags for the node process, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof",
 * BENCH_CP_ARGS the same for the control plane (run from its sources with tsx, on the bench's Node),
 * BENCH_TARGETS which targets to run (default "direct,floor,node,peer"; fewer is faster while iterating),
 * BENCH_LOADS which loads (default "closed,200,500"), BENCH_KEEP_WORK=1 to keep the work dir (node log, state),
 * BENCH_RUNTIME which Node runs the gateways: "packaged" (default; the package's Node 22, see
 * gateway-runtime.ts) or "host" (the Node running the bench).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import type { Histogram } from 'hdr-histogram-js';
import { closedLoop, emptyTally, newHistogram, openLoop } from './gateway-load.js';
import type { BenchTarget, LoadTally } from './gateway-load.js';
import { directTarget, startFloor, startNode, startPeer, startUpstream, Teardowns } from './gateway-targets.js';
import { gatewayRuntime } from './gateway-runtime.js';
import type { GatewayRuntime } from './gateway-runtime.js';
import { cpuSecondsOf } from './gateway-cpu.js';
import { gcDifference, gcSum, gcTable, nodeGcTotals, nodeStageTimes } from './gateway-node-metrics.js';
import type { GcTotals } from './gateway-node-metrics.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 6);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const WARMUP_SECONDS = Number(process.env.BENCH_WARMUP_SECONDS ?? 4);
const NODE_ARGS = (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter((a) => a !== '');
const CP_ARGS = (process.env.BENCH_CP_ARGS ?? '').split(' ').filter((a) => a !== '');
const TARGETS = (process.env.BENCH_TARGETS ?? 'direct,floor,node,peer').split(',').map((x) => x.trim());
const LOAD_NAMES = (process.env.BENCH_LOADS ?? 'closed,200,500').split(',').map((x) => x.trim());
const RUNTIME = process.env.BENCH_RUNTIME ?? 'packaged';
const CLOSED_CONNECTIONS = 32;
const OPEN_RATES = [200, 500] as const;
/** Enough that the pool never is the queue at 500/s unless the target is already seconds behind. */
const OPEN_CONNECTIONS = 256;

interface Load {
  name: string;
  run(target: BenchTarget, hist: Histogram, tally: LoadTally): Promise<void>;
}

const LOADS: Load[] = [
  ...(LOAD_NAMES.includes('closed') ? [{ name: `closed ${CLOSED_CONNECTIONS} conn`, run: (target: BenchTarget, hist: Histogram, tally: LoadTally) => closedLoop(target, { connections: CLOSED_CONNECTIONS, seconds: SECONDS }, hist, tally) }] : []),
  ...OPEN_RATES.filter((rate) => LOAD_NAMES.includes(String(rate))).map((rate): Load => ({ name: `open ${rate}/s`, run: (target, hist, tally) => openLoop(target, { rate, seconds: SECONDS, connections: OPEN_CONNECTIONS }, hist, tally) })),
];

interface Cell {
  hist: Histogram;
  tally: LoadTally;
  /** CPU seconds the target's own process used during this cell's loads (undefined: unknown). */
  cpuSeconds: number | undefined;
  /** Requests sent during those loads, answered or not (what the CPU was spent on). */
  attempted: number;
  /** CPU seconds this process (the load generator) used during those loads. */
  generatorCpuSeconds: number;
}

const ms = (us: number): string => (us / 1000).toFixed(2);
const signedMs = (us: number): string => `${us >= 0 ? '+' : ''}${(us / 1000).toFixed(2)}`;
const rps = (c: Cell): number => (c.tally.seconds > 0 ? c.tally.ok / c.tally.seconds : 0);
const log = (line: string): void => {
  process.stderr.write(`${line}\n`);
};

async function main(): Promise<void> {
  const t = new Teardowns();
  const work = mkdtempSync(join(os.tmpdir(), 'zn-bench-gateway-'));
  // BENCH_KEEP_WORK=1 keeps the node's state dir and log for a look afterwards.
  if (process.env.BENCH_KEEP_WORK !== '1') t.teardown(() => rmSync(work, { recursive: true, force: true }));
  const stopOnSignal = (): void => {
    void t.run().finally(() => process.exit(130));
  };
  process.once('SIGINT', stopOnSignal);
  process.once('SIGTERM', stopOnSignal);
  try {
    const began = Date.now();
    log('starting the upstream, PostgreSQL + control plane + enrolled node, and the peer gateway …');
    const runtime = await gatewayRuntime(RUNTIME, work, log);
    log(`gateways (node, floor, peer) run on ${runtime.name === 'packaged' ? "the package's Node" : "this machine's Node"} ${runtime.version}`);
    const upstream = await startUpstream(t);
    const node = TARGETS.includes('node') ? await startNode(t, upstream, work, runtime, NODE_ARGS, CP_ARGS) : undefined;
    const peer = TARGETS.includes('peer') ? await startPeer(t, upstream, runtime) : undefined;
    const floor = TARGETS.includes('floor') ? await startFloor(t, upstream, runtime) : undefined;
    const targets = [
      ...(TARGETS.includes('direct') ? [directTarget(upstream)] : []),
      ...(floor ? [floor] : []),
      ...(node ? [node.target] : []),
      ...(peer ? [peer] : []),
    ];
    log(`ready after ${((Date.now() - began) / 1000).toFixed(1)} s${node ? `; node log: ${node.logFile}` : ''}`);

    for (const target of targets) {
      log(`warm-up ${target.name} (${WARMUP_SECONDS} s closed-loop)`);
      const tally = emptyTally();
      await closedLoop(target, { connections: CLOSED_CONNECTIONS, seconds: WARMUP_SECONDS }, undefined, tally);
      if (tally.ok === 0) throw new Error(`${target.name} answered no request during warm-up: ${tally.firstError ?? 'no answer'}`);
    }

    const cells = new Map<string, Cell>();
    const cell = (target: string, load: string): Cell => {
      const key = `${target}|${load}`;
      let c = cells.get(key);
      if (!c) cells.set(key, (c = { hist: newHistogram(), tally: emptyTally(), cpuSeconds: 0, attempted: 0, generatorCpuSeconds: 0 }));
      return c;
    };
    const nodeGc = new Map<string, { gc: GcTotals; seconds: number; requests: number }>();
    const gcNow = async (target: string): Promise<GcTotals | undefined> =>
      target === 'node' && node?.adminUrl !== undefined ? nodeGcTotals(node.adminUrl).catch(() => undefined) : undefined;
    for (let round = 1; round <= ROUNDS; round++) {
      // Reverse the order every other round: whoever runs right after another target's load does
      // not always pay for that target's leftovers (GC, TIME_WAIT sockets).
      const order = round % 2 === 1 ? targets : [...targets].reverse();
      for (const load of LOADS) {
        for (const target of order) {
          const c = cell(target.name, load.name);
          const before = c.tally.ok;
          const beforeAll = c.tally.ok + c.tally.errors;
          const cpuBefore = cpuSecondsOf(target.pid);
          const gcBefore = await gcNow(target.name);
          const loadStarted = Date.now();
          const generatorBefore = process.cpuUsage();
          await load.run(target, c.hist, c.tally);
          const generator = process.cpuUsage(generatorBefore);
          c.generatorCpuSeconds += (generator.user + generator.system) / 1e6;
          const cpuAfter = cpuSecondsOf(target.pid);
          c.cpuSeconds = cpuBefore === undefined || cpuAfter === undefined || c.cpuSeconds === undefined ? undefined : c.cpuSeconds + (cpuAfter - cpuBefore);
          c.attempted += c.tally.ok + c.tally.errors - beforeAll;
          const gcAfter = gcBefore === undefined ? undefined : await gcNow(target.name);
          if (gcBefore !== undefined && gcAfter !== undefined) {
            const seen = nodeGc.get(load.name);
            const gc = gcDifference(gcAfter, gcBefore);
            const seconds = (Date.now() - loadStarted) / 1000;
            const requests = c.tally.ok + c.tally.errors - beforeAll;
            nodeGc.set(load.name, seen === undefined ? { gc, seconds, requests } : { gc: gcSum(seen.gc, gc), seconds: seen.seconds + seconds, requests: seen.requests + requests });
          }
          log(`round ${round}/${ROUNDS} ${load.name.padEnd(16)} ${target.name.padEnd(6)} ${c.tally.ok - before} ok, ${c.tally.errors} errors so far`);
        }
      }
    }

    printReport(cells, targets.map((x) => x.name), runtime);
    if (node?.adminUrl) {
      const stages = await nodeStageTimes(node.adminUrl).catch((err: unknown) => `could not read the node's metrics: ${(err as Error).message}`);
      process.stdout.write(`\n${stages}\n`);
      if (nodeGc.size > 0) process.stdout.write(`\n${gcTable(nodeGc)}\n`);
    }
    log(`done in ${((Date.now() - began) / 1000).toFixed(0)} s`);
  } finally {
    await t.run();
  }
}

function printReport(cells: Map<string, Cell>, targetNames: string[], runtime: GatewayRuntime): void {
  const get = (target: string, load: string): Cell | undefined => cells.get(`${target}|${load}`);
  const out: string[] = [];
  out.push(`machine: ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown CPU'}, ${(os.totalmem() / 1024 ** 3).toFixed(1)} GiB, Linux ${os.release()}; gateways on Node ${runtime.version} (${runtime.name}), upstream and load generator on Node ${process.version}`);
  out.push(`date: ${new Date().toISOString()}; ${ROUNDS} rounds × ${SECONDS} s per target and load, ${WARMUP_SECONDS} s warm-up each`);
  // Other work on the machine skews everything; say how busy it was so a reader can judge the numbers.
  const load = os.loadavg().map((l) => l.toFixed(1)).join(' / ');
  const busy = (os.loadavg()[0] ?? 0) > os.cpus().length;
  out.push(`load average (1/5/15 min) at the end: ${load}${busy ? ' — the machine was busy with other work: numbers are pessimistic' : ''}`);
  out.push('');
  out.push('| load | target | req/s | p50 ms | p99 ms | errors | added p50 vs direct | added p99 vs direct | req/s ÷ direct | req/s ÷ peer | req/s ÷ floor | CPU µs/req | load generator CPU µs/req |');
  out.push('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const load of LOADS) {
    const direct = get('direct', load.name);
    const peer = get('peer', load.name);
    const floor = get('floor', load.name);
    for (const name of targetNames) {
      const c = get(name, load.name);
      if (!c) continue;
      const p50 = c.hist.getValueAtPercentile(50);
      const p99 = c.hist.getValueAtPercentile(99);
      const vsDirect = name !== 'direct' && direct;
      const vsPeer = (name === 'node' || name === 'floor') && peer;
      const vsFloor = name === 'node' && floor;
      out.push(`| ${load.name} | ${name} | ${rps(c).toFixed(0)} | ${ms(p50)} | ${ms(p99)} | ${c.tally.errors} | `
        + `${vsDirect ? signedMs(p50 - direct.hist.getValueAtPercentile(50)) : '—'} | `
        + `${vsDirect ? signedMs(p99 - direct.hist.getValueAtPercentile(99)) : '—'} | `
        + `${vsDirect && rps(direct) > 0 ? (rps(c) / rps(direct)).toFixed(2) : '—'} | `
        + `${vsPeer && rps(peer) > 0 ? (rps(c) / rps(peer)).toFixed(1) : '—'} | `
        + `${vsFloor && rps(floor) > 0 ? (rps(c) / rps(floor)).toFixed(2) : '—'} | `
        + `${c.cpuSeconds !== undefined && c.attempted > 0 ? ((c.cpuSeconds * 1e6) / c.attempted).toFixed(0) : '—'} | `
        + `${c.attempted > 0 ? ((c.generatorCpuSeconds * 1e6) / c.attempted).toFixed(0) : '—'} |`);
    }
  }
  out.push('');
  out.push(...targetChecks(get));
  const errors = [...cells.entries()].filter(([, c]) => c.tally.firstError !== undefined).map(([k, c]) => `  ${k.replace('|', ' @ ')}: ${c.tally.firstError}`);
  if (errors.length > 0) out.push('', 'first error per cell:', ...errors);
  process.stdout.write(`${out.join('\n')}\n`);
}

function targetChecks(get: (target: string, load: string) => Cell | undefined): string[] {
  const lines: string[] = ['issue 5 targets:'];
  const verdict = (ok: boolean): string => (ok ? 'MET   ' : 'MISSED');
  const open500 = 'open 500/s';
  const closed = `closed ${CLOSED_CONNECTIONS} conn`;
  const [n5, d5] = [get('node', open500), get('direct', open500)];
  if (n5 && d5) {
    const addP50 = n5.hist.getValueAtPercentile(50) - d5.hist.getValueAtPercentile(50);
    const addP99 = n5.hist.getValueAtPercentile(99) - d5.hist.getValueAtPercentile(99);
    lines.push(`  ${verdict(addP50 <= 300)} at 500/s the node adds ≤ 0.3 ms p50: ${signedMs(addP50)} ms`);
    lines.push(`  ${verdict(addP99 <= 1000)} at 500/s the node adds ≤ 1 ms p99: ${signedMs(addP99)} ms`);
  }
  const [nc, dc, pc] = [get('node', closed), get('direct', closed), get('peer', closed)];
  if (nc && dc && pc) {
    const vsPeer = rps(pc) > 0 ? rps(nc) / rps(pc) : Infinity;
    lines.push(`  ${verdict(vsPeer >= 8)} closed-loop ≥ 8× the peer's req/s: ${vsPeer.toFixed(1)}×`);
  }
  if (nc && dc) {
    const vsDirect = rps(dc) > 0 ? rps(nc) / rps(dc) : 0;
    lines.push(`  ${verdict(vsDirect >= 0.25)} closed-loop ≥ 25% of direct: ${(vsDirect * 100).toFixed(0)}%`);
  }
  // The same four figures for the bare pass-through: what no Node gateway can beat on this machine.
  const [f5, fc] = [get('floor', open500), get('floor', closed)];
  if (f5 || fc) lines.push('for reference, the bare pass-through (floor) on the same runs:');
  if (f5 && d5) {
    lines.push(`  at 500/s it adds ${signedMs(f5.hist.getValueAtPercentile(50) - d5.hist.getValueAtPercentile(50))} ms p50 and ${signedMs(f5.hist.getValueAtPercentile(99) - d5.hist.getValueAtPercentile(99))} ms p99`);
  }
  if (fc && dc) {
    const parts = [`${((rps(fc) / Math.max(1, rps(dc))) * 100).toFixed(0)}% of direct`];
    if (pc && rps(pc) > 0) parts.push(`${(rps(fc) / rps(pc)).toFixed(1)}× the peer`);
    lines.push(`  closed-loop it serves ${parts.join(', ')}`);
  }
  return lines;
}

await main();
