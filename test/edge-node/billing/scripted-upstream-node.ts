// A priced node app in front of one scripted upstream that serves both an OpenAI-compatible alias
// (`echo`) and an Anthropic one (`claude`), each route retried once: the test sets what the
// upstream answers (`answer`), posts a request and gets the caller's status and body, and the
// request's record once the spool stage wrote it. Both aliases cost 3 µ per input token and 15 µ per
// output token, from a lease large enough for any test.
import http from 'node:http';
import { pino } from 'pino';
import type { RequestRecord } from '../../../proto/src/index.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { listenForTest } from '../../fixtures/loopback-server.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { recordsInto } from '../anthropic-fixtures.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { startPipelineNode, withClaudeRoute } from '../pipeline/pipeline-harness.js';

export const PRICE = { inputMicrosPerToken: 3, outputMicrosPerToken: 15, requestMicros: 0 };

export type Answer = (res: http.ServerResponse) => void;

export interface Exchange {
  status: number;
  text: string;
  record: RequestRecord;
}

export interface ScriptedUpstreamNode {
  /** What the upstream answers next; each call to it takes the next entry, the last one repeats. */
  answer(...answers: Answer[]): void;
  /** Requests the upstream received since the last `answer`. */
  calls(): number;
  post(path: string, body: unknown): Promise<Exchange>;
}

export async function startScriptedUpstreamNode(t: { teardown(fn: () => unknown): void }): Promise<ScriptedUpstreamNode> {
  let answers: Answer[] = [];
  let calls = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const answer = answers[Math.min(calls, answers.length - 1)];
      calls++;
      if (answer === undefined) res.writeHead(500).end();
      else answer(res);
    });
  });
  const upstreamUrl = await listenForTest(t, server);
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 1_000_000_000, expiresAt: Date.now() + 600_000 });
  const records: RequestRecord[] = [];
  const node = await startPipelineNode(t, {
    upstreamUrl,
    bundle: (base) => {
      const claude = withClaudeRoute(base, upstreamUrl);
      return { ...claude, routes: claude.routes.map((route) => ({ ...route, retries: 1 })), prices: [{ model: 'claude', ...PRICE }, { model: 'echo', ...PRICE }] };
    },
    services: { credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' })), spool: recordsInto(records) },
  });
  return {
    answer(...next: Answer[]): void {
      answers = next;
      calls = 0;
    },
    calls: () => calls,
    async post(path: string, body: unknown): Promise<Exchange> {
      const res = await fetch(`${node.origin}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}`, 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
        body: JSON.stringify(body),
      });
      const text = await res.text();
      const requestId = res.headers.get('x-request-id') ?? res.headers.get('request-id');
      const record = await waitFor(() => records.find((r) => r.requestId === requestId), { what: `the record of ${String(requestId)}` });
      return { status: res.status, text, record };
    },
  };
}

/** A JSON answer with status 200. */
export function json(body: unknown): Answer {
  return (res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
}

/** An event stream of these SSE lines (each a `data:` JSON, or given whole), then the end of the body. */
export function sse(events: Array<{ event?: string; data: unknown }>): Answer {
  return (res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(events.map((e) => `${e.event === undefined ? '' : `event: ${e.event}\n`}data: ${typeof e.data === 'string' ? e.data : JSON.stringify(e.data)}\n\n`).join(''));
  };
}
