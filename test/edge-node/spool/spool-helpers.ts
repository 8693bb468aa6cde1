// Shared setup for spool tests: a temp state dir, records shaped like the pipeline's, a quiet logger,
// and what a spool file holds, read back.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { REQUEST_RECORD_SCHEMA_VERSION } from '../../../proto/src/index.js';
import type { RequestRecord } from '../../../proto/src/index.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import type { Logger } from '../../../edge-node/src/logger.js';
import type { OpenRow } from '../../../edge-node/src/spool/request-spool.js';

export const NODE_ID = 'node-spool-test-0001';

export function tempStateDir(t: { teardown(fn: () => unknown): void }): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-spool-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export function quietLogger(): Logger {
  return createLogger({ level: 'silent' });
}

export function openRow(requestId: string, extra: Partial<OpenRow> = {}): OpenRow {
  return { requestId, receivedAt: 1_700_000_000_000, keyId: 'key-1', accountId: 'acct-1', model: 'echo', reservedMicros: 1500, leaseId: 'lease-1', ...extra };
}

export function record(requestId: string, extra: Partial<RequestRecord> = {}): RequestRecord {
  return {
    schemaVersion: REQUEST_RECORD_SCHEMA_VERSION,
    requestId,
    nodeId: NODE_ID,
    configVersion: 3,
    receivedAt: 1_700_000_000_000,
    finishedAt: 1_700_000_000_050,
    surface: 'model',
    api: 'chat.completions',
    keyId: 'key-1',
    accountId: 'acct-1',
    model: 'echo',
    upstream: 'demo',
    upstreamModel: 'demo-echo',
    stream: false,
    status: 'ok',
    httpStatus: 200,
    errorCode: null,
    usage: { inputTokens: 10, outputTokens: 20, estimated: false },
    cost: { reservedMicros: 1500, costMicros: 900, leaseId: 'lease-1', priced: true },
    timings: { totalMs: 50, upstreamFirstByteMs: 10, upstreamMs: 40, stagesUs: { identify: 12 } },
    attempts: [],
    guardrails: [],
    bodies: { request: '{"model":"echo"}', response: 'hi', truncated: false },
    ...extra,
  };
}

/** What a spool file holds: its open rows and its records (the fields recovery sets), each by request id. */
export interface SpoolState {
  open: string[];
  records: Array<{ id: string; status: string; reservedMicros: number }>;
}

/** Reads `file` on a connection of its own; records sorted by request id, so a test need not know the order a recovery wrote them in. */
export function spoolState(file: string): SpoolState {
  const db = new Database(file, { readonly: true });
  try {
    const open = db.prepare('select request_id from open_requests order by request_id').pluck().all() as string[];
    const records = (db.prepare('select record_json from records order by sequence').pluck().all() as string[]).map((j) => {
      const r = JSON.parse(j) as { requestId: string; status: string; cost: { reservedMicros: number } };
      return { id: r.requestId, status: r.status, reservedMicros: r.cost.reservedMicros };
    });
    return { open, records: records.sort((a, b) => a.id.localeCompare(b.id)) };
  } finally {
    db.close();
  }
}

/**
 * Another replica beside the test (spool-wal-writer-child.ts): writing `file` unthrottled, or
 * holding an owner slot of it. Resolved once it does; stop() kills it -9 and waits for its exit.
 */
export async function startReplica(t: { teardown(fn: () => unknown): void }, file: string, role: 'write' | 'hold'): Promise<{ stop(): Promise<void> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./spool-wal-writer-child.ts', import.meta.url)), file, role], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  t.teardown(() => child.kill('SIGKILL'));
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      if (out.includes('ready\n')) resolve();
    });
    child.once('exit', (code, signal) => reject(new Error(`the replica exited (${code ?? signal}) before it was ready`)));
  });
  return {
    async stop() {
      child.kill('SIGKILL');
      await exited;
    },
  };
}
