// A finished request's objects must die young. V8's young-generation GC (the scavenger) keeps a
// WeakMap entry's key alive when the entry's value refers back to the key (a closure over the
// pipeline context did): every request's whole object graph then survived its scavenges, was
// promoted, and made each scavenge copy megabytes (a 5–28 ms pause at 500 req/s: the p99 in
// docs/performance.md). This counts, with V8's sampling heap profiler, how many of the bytes
// allocated for pipeline contexts survived a young-generation GC, for requests sent one at a time
// (so at most one context is live when a scavenge runs): with the closure in a WeakMap about 80 %
// of those bytes survived, without it about 10 % (contexts caught live by a scavenge).
import { Session } from 'node:inspector/promises';
import t from 'tap';
import { createLogger } from '../../../edge-node/src/logger.js';
import { createNodeRateLimiter } from '../../../edge-node/src/rate-limit/create-node-rate-limiter.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { bundleKey } from '../config-fixtures.js';
import { startPipelineNode } from './pipeline-harness.js';

interface ProfileNode {
  callFrame: { functionName: string };
  selfSize: number;
  children?: ProfileNode[];
}

/** Bytes allocated directly in `functionName` (anywhere in the call tree). */
function bytesAllocatedIn(head: ProfileNode, functionName: string): number {
  let bytes = 0;
  const walk = (node: ProfileNode): void => {
    if (node.callFrame.functionName === functionName) bytes += node.selfSize;
    for (const child of node.children ?? []) walk(child);
  };
  walk(head);
  return bytes;
}

const LIMITS = { requestsPerMinute: 1_000_000, tokensPerMinute: 1_000_000_000, concurrentRequests: 1_000 };
const REQUESTS = 600;

t.test('the pipeline contexts of finished requests do not survive a young-generation GC', async (t) => {
  const upstream = await startFakeUpstream(t);
  const limiter = await createNodeRateLimiter({ stateDir: t.testdir(), logger: createLogger({ level: 'silent' }), env: {} });
  t.teardown(() => limiter.close());
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    // Limits on key and account: admitting a request registers its concurrency slot's release.
    bundle: (base, keyHash) => ({
      accounts: [{ ...base.accounts[0]!, limits: LIMITS }],
      apiKeys: [bundleKey('key-a', keyHash, { limits: LIMITS })],
    }),
    services: { limiter },
  });
  const statuses = new Map<number, number>();
  let sent = 0;
  const send = async (): Promise<void> => {
    sent += 1;
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
      body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'how long do you live?' }] }),
    });
    statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    await res.arrayBuffer();
  };
  await send(); // warm: first-use allocations (compiled schemas, pools) are not per request

  const session = new Session();
  session.connect();
  t.teardown(() => session.disconnect());
  // Two runs alike: one counting every allocation, one leaving out what a young GC collected.
  const contextBytes = async (includeCollectedByMinorGC: boolean): Promise<number> => {
    await session.post('HeapProfiler.startSampling', {
      samplingInterval: 128,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: includeCollectedByMinorGC,
    });
    for (let i = 0; i < REQUESTS; i++) {
      await send();
      // Enough garbage between requests that young GCs run throughout, whatever the semi-space size,
      // made once the request has finished (its tail stages run after the answer is sent).
      if (i % 50 === 0) {
        await waitFor(() => node.finished.length === sent, { what: 'the request to finish' });
        new Array(200_000).fill(0).map((n: number) => ({ n }));
      }
    }
    const { profile } = await session.post('HeapProfiler.stopSampling');
    return bytesAllocatedIn(profile.head, 'newPipelineContext');
  };
  const allocated = await contextBytes(true);
  const survived = await contextBytes(false);
  t.same([...statuses], [[200, 2 * REQUESTS + 1]], 'every request was answered 200');
  t.ok(allocated > 0, `the profiler saw the contexts allocated (${allocated} bytes)`);
  t.ok(
    survived < allocated * 0.4,
    `${survived} of ${allocated} bytes of pipeline contexts survived a young-generation GC (at most one request was live at a time)`,
  );
});
