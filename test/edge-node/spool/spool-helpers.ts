// Shared setup for spool tests: a temp state dir, records shaped like the pipeline's, a quiet logger.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
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
