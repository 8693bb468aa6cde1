// A JSON answer whose headers do not come within the per-target timeout once the upstream had the
// whole request (UND_ERR_HEADERS_TIMEOUT, or the attempt's own timer first) is not sent again to
// that target: the upstream may only be slow, but it goes on generating and bills each resend. The
// plan goes on with the next target, as for a JSON body that stalls after its 2xx headers
// (attempt-timeout-body.test.ts). A timeout while connecting (nothing sent) is still retried there.
// Before, the route's retries were all spent on the slow target, each billed by the upstream.
import t from 'tap';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';
import { RETRIES, askSlow as ask, finishedOf, silentTlsUpstream, slowRouteNode } from './timeout-route-fixtures.js';

async function attemptsOf(node: PipelineNode, res: Response): Promise<unknown[]> {
  return (await finishedOf(node, res)).attempts;
}

t.test('a chat answer whose headers do not come in time is not resent to that target, and the fallback answers', async (t) => {
  const slow = await startFakeUpstream(t, { hang: true });
  const backup = await startFakeUpstream(t);
  const node = await slowRouteNode(t, slow.url, backup.url);
  const res = await ask(node);
  const body = (await res.json()) as { model?: string; choices?: unknown[] };
  t.equal(res.status, 200, JSON.stringify(body));
  t.equal(body.model, 'slow');
  t.equal(slow.requests.length, 1, `the slow target had the request once, its ${RETRIES} retries not spent there`);
  t.equal(backup.requests.length, 1, 'the fallback had it once');
  const attempts = await attemptsOf(node, res);
  t.match(attempts, [
    { upstream: 'demo', outcome: 'timeout', httpStatus: null },
    { upstream: 'backup', outcome: 'ok', httpStatus: 200 },
  ]);
  t.equal(attempts.length, 2);
});

t.test('an embeddings answer whose headers do not come in time is not resent to that target either', async (t) => {
  const slow = await startFakeUpstream(t, { hang: true });
  const backup = await startFakeUpstream(t);
  const node = await slowRouteNode(t, slow.url, backup.url);
  const res = await ask(node, { messages: undefined, input: 'hi' }, '/v1/embeddings');
  t.equal(res.status, 200, await res.clone().text());
  await res.json();
  t.equal(slow.requests.length, 1);
  t.equal(backup.requests.length, 1);
});

t.test('alone, a headers timeout is one request to the upstream and a 504 ZN_ERR_UPSTREAM_TIMEOUT that says not to resend, as a stalled JSON body', async (t) => {
  const slow = await startFakeUpstream(t, { hang: true });
  const node = await slowRouteNode(t, slow.url);
  const res = await ask(node);
  const body = (await res.json()) as { error?: { code?: string } };
  t.equal(res.status, 504, JSON.stringify(body));
  t.equal(body.error?.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
  t.equal(res.headers.get('x-should-retry'), 'false', 'the upstream goes on with the request: a resend would be billed again');
  t.equal(slow.requests.length, 1, 'no retry on the same target');
  t.match(await attemptsOf(node, res), [{ upstream: 'demo', outcome: 'timeout', httpStatus: null }]);
});

t.test('a connect timeout (nothing sent) is still retried on the same target, and its 504 may be resent', async (t) => {
  const silent = await silentTlsUpstream();
  const node = await slowRouteNode(t, silent.url);
  // After the node's own teardown is registered, so it runs first and its pools do not wait for
  // the connect timeout when they close.
  t.teardown(silent.release);
  const res = await ask(node);
  const body = (await res.json()) as { error?: { code?: string } };
  t.equal(res.status, 504, JSON.stringify(body));
  t.equal(body.error?.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
  t.equal(res.headers.get('x-should-retry'), 'true', 'the upstream never had the request');
  t.equal(silent.connections(), RETRIES + 1, 'every retry went to the target');
  const attempts = await attemptsOf(node, res);
  t.equal(attempts.length, RETRIES + 1);
  t.match(attempts, [{ upstream: 'demo', outcome: 'timeout' }, { upstream: 'demo', outcome: 'timeout' }, { upstream: 'demo', outcome: 'timeout' }]);
});
