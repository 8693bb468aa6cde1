// A listening node whose one tool server ("tools") is priced per call, with a real credit lease for
// the caller's account and a spool that keeps every record: for tests of what MCP calls cost.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import type { RequestRecord } from '../../../proto/src/index.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import type { CreditLease } from '../../../edge-node/src/billing/credit-lease.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import type { RequestSpool } from '../../../edge-node/src/spool/request-spool.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';

export const CALL_MICROS = 1_000;

type Teardown = { teardown(fn: () => unknown): void };

export interface PricedToolNode {
  /** The node's /mcp/tools. */
  url: string;
  /** Headers carrying the caller's key (account acct-1). */
  auth: Record<string, string>;
  records: RequestRecord[];
  lease(): CreditLease;
}

export async function startPricedToolNode(t: Teardown, toolServerUrl: string, opts: { timeoutMs?: number } = {}): Promise<PricedToolNode> {
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 1_000_000, expiresAt: Date.now() + 3_600_000 });
  const credit = new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' }));
  const records: RequestRecord[] = [];
  const spool: RequestSpool = { open: () => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const node = await startPipelineNode(t, {
    upstreamUrl: 'http://127.0.0.1:9/v1',
    bundle: (base) => ({
      node: { ...base.node, surfaces: ['model', 'tools'] },
      toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: null, timeoutMs: opts.timeoutMs ?? 10_000, callMicros: CALL_MICROS }],
    }),
    services: { credit, spool },
  });
  return { url: `${node.origin}/mcp/tools`, auth: { authorization: `Bearer ${node.secret}` }, records, lease: () => book.leaseOf(ACCOUNT_ID)! };
}

/** A tool server on 127.0.0.1:0 that hands each whole request (its body read) to `handle`. */
export async function rawToolServer(t: Teardown, handle: (req: http.IncomingMessage, res: http.ServerResponse, body: string) => void): Promise<{ url: string; bodies: string[] }> {
  const bodies: string[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
    req.on('end', () => {
      bodies.push(body);
      handle(req, res, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, bodies };
}

export function toolCall(id: number): Record<string, unknown> {
  return { jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'echo', arguments: { text: `call ${id}` } } };
}

export function postTo(node: PricedToolNode, body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(node.url, {
    method: 'POST',
    redirect: 'manual',
    headers: { ...node.auth, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify(body),
    ...(signal !== undefined ? { signal } : {}),
  });
}

/** POSTs `body` as written (no re-serialisation) to an /mcp URL with a caller key; the status and the answer's text. */
export async function postRawMcp(url: string, key: { secret: string }, body: string): Promise<{ status: number; text: string }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body,
  });
  return { status: res.status, text: await res.text() };
}
