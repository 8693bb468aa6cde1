/**
 * Load generators for `bench:gateway`: closed-loop (N connections, each sends its next request when
 * the previous answer is read) and open-loop (requests sent at a fixed rate on a schedule; latency is
 * measured from each request's SCHEDULED send time, so queueing anywhere — in the target, or in the
 * generator when it falls behind — shows up instead of being hidden). Latencies go into an HDR
 * histogram in microseconds that the caller owns, so rounds of the same target and load accumulate.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import * as hdr from 'hdr-histogram-js';
import type { Histogram } from 'hdr-histogram-js';
import { RawHttpConnection, requestBytes } from './raw-http-client.js';

/** One gateway (or the bare upstream) and the identical request sent to it. */
export interface BenchTarget {
  name: string;
  origin: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  /** The process that does the target's work (the gateway; the upstream for direct), for CPU/request. */
  pid?: number;
}

export interface LoadTally {
  /** Completed 200 answers (their latencies are in the histogram). */
  ok: number;
  /** Non-200 answers, transport errors, and open-loop requests still unanswered at the drain deadline. */
  errors: number;
  /** Wall time the load ran, for req/s. */
  seconds: number;
  /** First error seen, to explain a bad row. */
  firstError?: string;
}

const REQUEST_TIMEOUT_MS = 10_000;
/** Open-loop: how long to wait for stragglers after the last scheduled send. */
const DRAIN_MS = 10_000;

export function newHistogram(): Histogram {
  // 1 µs .. 60 s at 3 significant digits.
  return hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 });
}

export function emptyTally(): LoadTally {
  return { ok: 0, errors: 0, seconds: 0 };
}

/** Connections to one target, all sending its one request (raw-http-client.ts). */
class TargetConnections {
  private readonly request: Buffer;
  private readonly host: string;
  private readonly port: number;
  private readonly all: RawHttpConnection[] = [];

  constructor(target: BenchTarget) {
    const url = new URL(target.origin);
    this.host = url.hostname;
    this.port = Number(url.port);
    this.request = requestBytes(url.host, target.path, target.headers, target.body);
  }

  open(): RawHttpConnection {
    const connection = new RawHttpConnection(this.port, this.host, this.request, REQUEST_TIMEOUT_MS);
    this.all.push(connection);
    return connection;
  }

  closeAll(): void {
    for (const connection of this.all) connection.close();
  }
}

/** One request; resolves undefined when a full 200 answer was read, else what went wrong. */
async function send(connection: RawHttpConnection): Promise<string | undefined> {
  try {
    const answer = await connection.send();
    return answer.status === 200 ? undefined : `HTTP ${answer.status}: ${(answer.errorBody ?? '').slice(0, 300)}`;
  } catch (err) {
    return (err as Error).message;
  }
}

function countError(tally: LoadTally, error: string): void {
  tally.errors += 1;
  tally.firstError ??= error;
}

/** `connections` workers, each looping request → read answer, for `seconds`. */
export async function closedLoop(target: BenchTarget, opts: { connections: number; seconds: number }, hist: Histogram | undefined, tally: LoadTally): Promise<void> {
  const connections = new TargetConnections(target);
  const started = performance.now();
  const end = started + opts.seconds * 1000;
  const worker = async (): Promise<void> => {
    const connection = connections.open();
    while (performance.now() < end) {
      const t0 = performance.now();
      const error = await send(connection);
      if (error !== undefined) countError(tally, error);
      else {
        tally.ok += 1;
        hist?.recordValue(Math.max(1, Math.round((performance.now() - t0) * 1000)));
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: opts.connections }, () => worker()));
    tally.seconds += (performance.now() - started) / 1000;
  } finally {
    connections.closeAll();
  }
}

/**
 * `rate` requests per second for `seconds`, each fired at its scheduled instant (or as soon after as
 * the generator's event loop allows: that lateness is counted, as a real caller would feel it).
 */
export async function openLoop(target: BenchTarget, opts: { rate: number; seconds: number; connections: number }, hist: Histogram, tally: LoadTally): Promise<void> {
  const connections = new TargetConnections(target);
  // Idle connections, and sends waiting for one when all `opts.connections` are busy.
  const idle: RawHttpConnection[] = [];
  let opened = 0;
  const waiting: number[] = [];
  const total = Math.round(opts.rate * opts.seconds);
  const intervalMs = 1000 / opts.rate;
  const inFlight = new Set<Promise<void>>();
  let counting = true; // off once stragglers are given up on, so they are not counted twice
  const fire = (scheduledAt: number): void => {
    let connection = idle.pop();
    if (connection === undefined) {
      if (opened === opts.connections) {
        waiting.push(scheduledAt);
        return;
      }
      opened += 1;
      connection = connections.open();
    }
    const on = connection;
    const p = send(on).then((error) => {
      inFlight.delete(p);
      if (!counting) return;
      idle.push(on);
      const next = waiting.shift();
      if (next !== undefined) fire(next);
      if (error !== undefined) countError(tally, error);
      else {
        tally.ok += 1;
        hist.recordValue(Math.max(1, Math.round((performance.now() - scheduledAt) * 1000)));
      }
    });
    inFlight.add(p);
  };
  const start = performance.now() + 5;
  let sent = 0;
  try {
    while (sent < total) {
      const now = performance.now();
      while (sent < total && start + sent * intervalMs <= now) {
        fire(start + sent * intervalMs);
        sent += 1;
      }
      // A 1 ms timer rather than a busy loop: on 2 cores a spinning generator would steal a core.
      if (sent < total) await sleep(Math.max(0, Math.min(1, start + sent * intervalMs - performance.now())));
    }
    const scheduleEnd = performance.now();
    const drained = (async () => {
      // Sends still waiting for a connection join inFlight as connections free up.
      while (inFlight.size > 0) await Promise.all([...inFlight]);
    })();
    const deadline = sleep(DRAIN_MS).then(() => 'late' as const);
    if ((await Promise.race([drained, deadline])) === 'late') {
      counting = false;
      const unanswered = inFlight.size + waiting.length;
      tally.errors += unanswered;
      tally.firstError ??= `${unanswered} requests unanswered ${DRAIN_MS} ms after the schedule ended`;
    }
    // req/s over the schedule, not the drain: an open loop offers `rate`; completions show if it kept up.
    tally.seconds += (scheduleEnd - start) / 1000;
  } finally {
    connections.closeAll();
  }
}
