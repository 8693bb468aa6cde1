// The order of the stages as callers experience it (a reordered PIPELINE fails here): who refuses
// first, what never reaches the upstream, headers the stages add on success and on refusal, the
// tail stages and cleanups for every request, and a stage that throws.
import t from 'tap';
import { PIPELINE } from '../../../edge-node/src/pipeline/stages.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import { reject } from '../../../edge-node/src/pipeline/stage.js';
import type { RateLimiter } from '../../../edge-node/src/rate-limit/rate-limiter.js';
import type { CreditLeases } from '../../../edge-node/src/billing/credit-leases.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { sdkError, startPipelineNode } from './pipeline-harness.js';

const ask = { model: 'echo', messages: [{ role: 'user' as const, content: 'in order' }] };

t.test('the stage list is the one DESIGN §5 names, tail stages last', async (t) => {
  t.same(
    PIPELINE.map((s) => s.name),
    ['identify', 'authenticate', 'surface', 'rate-limit', 'guardrails-in', 'preauthorise', 'route', 'forward', 'guardrails-out', 'meter', 'settle', 'spool'],
  );
  t.same(PIPELINE.filter((s) => s.always).map((s) => s.name), ['meter', 'settle', 'spool']);
});

t.test('a rate-limit refusal comes after authentication and before anything upstream, with its headers', async (t) => {
  const upstream = await startFakeUpstream(t);
  const limiter: RateLimiter = {
    admit(ctx: PipelineContext) {
      ctx.responseHeaders['x-ratelimit-limit-requests'] = '1';
      ctx.responseHeaders['retry-after'] = '7';
      return reject('ZN_ERR_RATE_LIMITED');
    },
    close: () => undefined,
  };
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { limiter } });
  const err = await sdkError(node.client().chat.completions.create(ask));
  t.equal(err.status, 429);
  t.equal(err.code, 'ZN_ERR_RATE_LIMITED');
  t.equal(err.headers?.get('retry-after'), '7');
  t.equal(err.headers?.get('x-ratelimit-limit-requests'), '1');
  t.equal(upstream.requests.length, 0);
  t.same(node.finished[0]?.stages, ['identify', 'authenticate', 'surface', 'rate-limit', 'meter', 'settle', 'spool']);
  const anonymous = await sdkError(node.client({ apiKey: 'zn_sk_unknown' }).chat.completions.create(ask));
  t.equal(anonymous.code, 'ZN_ERR_API_KEY_INVALID', 'an unknown caller is refused by authentication, not counted by the limiter');
});

t.test('a credit refusal stops the request before routing: the upstream is never called', async (t) => {
  const upstream = await startFakeUpstream(t);
  const credit: CreditLeases = { preauthorise: () => reject('ZN_ERR_CREDIT_EXHAUSTED'), beforeForward: () => undefined, settle: () => undefined, recordCommitted: () => undefined };
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { credit } });
  const err = await sdkError(node.client().chat.completions.create(ask));
  t.equal(err.status, 402);
  t.equal(upstream.requests.length, 0);
  t.notOk(node.finished[0]?.stages.includes('route'));
});

t.test('headers the stages add reach the caller on JSON and streamed answers, and cleanups run once per request', async (t) => {
  const upstream = await startFakeUpstream(t);
  let cleanups = 0;
  const limiter: RateLimiter = {
    admit(ctx: PipelineContext) {
      ctx.responseHeaders['x-ratelimit-remaining-requests'] = '41';
      ctx.cleanups.push(() => cleanups++);
      return undefined;
    },
    close: () => undefined,
  };
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { limiter } });
  const { response } = await node.client().chat.completions.create(ask).withResponse();
  t.equal(response.headers.get('x-ratelimit-remaining-requests'), '41');
  const { data: stream, response: streamed } = await node.client().chat.completions.create({ ...ask, stream: true }).withResponse();
  for await (const chunk of stream) void chunk;
  t.equal(streamed.headers.get('x-ratelimit-remaining-requests'), '41');
  t.ok(streamed.headers.get('x-request-id'));
  await waitFor(() => node.finished.length === 2, { what: 'both requests to finish' });
  t.equal(cleanups, 2, 'one cleanup per request, run once');
});

t.test('a stage that throws answers ZN_ERR_INTERNAL, still runs the tail stages and logs the request id', async (t) => {
  const upstream = await startFakeUpstream(t);
  let cleaned = false;
  const limiter: RateLimiter = {
    admit(ctx: PipelineContext) {
      ctx.cleanups.push(() => {
        cleaned = true;
      });
      throw new Error('limiter exploded');
    },
    close: () => undefined,
  };
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { limiter } });
  const err = await sdkError(node.client().chat.completions.create(ask));
  t.equal(err.status, 500);
  t.equal(err.code, 'ZN_ERR_INTERNAL');
  t.notMatch(err.message, /exploded/, 'internals are not echoed');
  const done = node.finished[0]!;
  t.same(done.outcome, { status: 'failed', httpStatus: 500, errorCode: 'ZN_ERR_INTERNAL' });
  t.ok(done.stages.includes('spool'));
  t.ok(cleaned);
  t.ok(node.logs().some((l) => l.msg === 'pipeline stage failed' && l.requestId === done.requestId && l.stage === 'rate-limit'));
});
