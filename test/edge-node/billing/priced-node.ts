// A pipeline node whose alias `echo` is priced (1 micro per input token, 10 per output token) with
// a 100-unit lease open for the account, and what each finished request was charged.
import type { Test } from 'tap';
import { pino } from 'pino';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import type { ConfigBundle } from '../../../proto/src/index.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';

export interface Finished {
  usage: PipelineContext['usage'];
  cost: PipelineContext['cost'];
  status: string;
  /** The upstream the request is recorded as served by (charged for), if any. */
  upstream: string | undefined;
  keptChars: number;
}

/** `route` changes the fixture's route (a timeout, retries). */
export async function pricedNode(
  t: Test,
  url: string,
  opts: { route?: (route: ConfigBundle['routes'][number]) => ConfigBundle['routes'][number] } = {},
): Promise<{ node: PipelineNode; finished: Finished[] }> {
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: 100_000_000, expiresAt: Date.now() + 600_000 });
  const credit = new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' }));
  const finished: Finished[] = [];
  const node = await startPipelineNode(t, {
    upstreamUrl: url,
    bundle: (base) => ({
      prices: [{ model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 10, requestMicros: 0 }],
      ...(opts.route === undefined ? {} : { routes: base.routes.map(opts.route) }),
    }),
    services: {
      credit,
      metrics: {
        requestFinished: (ctx: PipelineContext) =>
          void finished.push({ usage: { ...ctx.usage }, cost: { ...ctx.cost }, status: ctx.outcome.status, upstream: ctx.served?.upstream, keptChars: ctx.responseText.length }),
      },
    },
  });
  return { node, finished };
}
