// An upstream JSON answer the node can parse but not serialise again (a field nested 10 000 deep:
// JSON.stringify runs out of stack) is an invalid upstream answer: the caller gets a final 502
// ZN_ERR_UPSTREAM_ERROR (not a retryable 500 its SDK resends), and the record says so, uncharged,
// instead of `ok` with the usage of an answer the caller never got.
import http from 'node:http';
import t from 'tap';
import { pino } from 'pino';
import type { RequestRecord } from '../../proto/src/index.js';
import { DEFAULT_CREDIT_POLICY } from '../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../edge-node/src/billing/lease-store.js';
import type { RequestSpool } from '../../edge-node/src/spool/request-spool.js';
import { listenForTest } from '../fixtures/loopback-server.js';
import { ACCOUNT_ID } from './config-fixtures.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';

const DEPTH = 10_000;

t.test('an upstream JSON answer nested too deeply to pass on fails as ZN_ERR_UPSTREAM_ERROR, recorded failed and not charged', async (t) => {
  const upstream = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const deep = '['.repeat(DEPTH) + ']'.repeat(DEPTH);
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7},"system_fingerprint":${deep}}`,
      );
    });
  });
  const url = await listenForTest(t, upstream);
  const records: RequestRecord[] = [];
  const spool: RequestSpool = { open: () => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 100_000_000, expiresAt: Date.now() + 600_000 });
  const credit = new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' }));
  const node = await startPipelineNode(t, {
    upstreamUrl: url,
    bundle: () => ({ prices: [{ model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 10, requestMicros: 0 }] }),
    services: { spool, credit },
  });

  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }),
  });
  const body = (await res.json()) as { error?: { code?: string } };
  t.equal(res.status, 502, 'the caller gets a 502');
  t.equal(body.error?.code, 'ZN_ERR_UPSTREAM_ERROR', 'naming the upstream answer as the fault');
  t.equal(res.headers.get('x-should-retry'), 'false', 'which the SDKs are told not to resend');
  t.equal(records.length, 1, 'one record');
  const record = records[0]!;
  t.match(record, { status: 'failed', httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_ERROR' }, 'the record says the request failed, with that code');
  t.equal(record.cost.costMicros, 0, 'and charges nothing for an answer the caller never got');
  t.equal(record.attempts.at(-1)?.outcome, 'error', 'its attempt is recorded as an unusable answer');
  t.notOk(node.logs().some((line) => (line.level as number) >= 50), 'no error is logged as a node failure');
});
