// A config swap while requests are in flight: each request finishes on the config it started with
// (its upstream, its key's standing), and the next request sees the new config.
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { startNode } from './node-harness.js';

const ECHO = '[zenova demo upstream] echo: ';

function chat(baseURL: string, key: string, content: string, stream = false): Promise<Response> {
  return fetch(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content }], stream }),
  });
}

t.test('a request held at the upstream during a swap completes on its old config; the next one uses the new config', async (t) => {
  // The old upstream holds every answer long enough for the swap to land while the call is in flight.
  const oldUpstream = await startFakeUpstream(t, { latencyMs: 3_000 });
  const newUpstream = await startFakeUpstream(t);
  const key = newCallerKey();
  const laterKey = newCallerKey();
  const v1 = fromBundle(testBundle({ nodeId: 'n', version: 1, upstreamUrl: oldUpstream.url, keys: [bundleKey('k1', key.sha256)] }));
  const v2 = fromBundle(
    testBundle({
      nodeId: 'n',
      version: 2,
      // Another origin: the old upstream's connection pool is retired by the swap.
      upstreamUrl: newUpstream.url,
      keys: [bundleKey('k1', key.sha256, { status: 'revoked' }), bundleKey('k2', laterKey.sha256)],
    }),
  );
  const node = await startNode(t, ConfigHolder.ready(v1));

  let settled = false;
  const inFlight = chat(node.baseURL, key.secret, 'started on v1').then(async (res) => {
    settled = true;
    return { status: res.status, body: (await res.json()) as { choices?: Array<{ message: { content: string } }> } };
  });
  await waitFor(() => oldUpstream.requests.length === 1, { what: 'the call to reach the old upstream' });
  node.holder.swap(v2);
  t.notOk(settled, 'the request was still in flight when the config was swapped');

  const done = await inFlight;
  t.equal(done.status, 200, 'the in-flight request finished');
  t.equal(done.body.choices?.[0]?.message.content, `${ECHO}started on v1`);
  t.equal(newUpstream.requests.length, 0, 'it was never re-routed to the new upstream');

  const revoked = await chat(node.baseURL, key.secret, 'after the swap');
  t.equal(revoked.status, 401, 'the next request with the now-revoked key is refused');
  t.equal(((await revoked.json()) as { error: { code: string } }).error.code, 'ZN_ERR_API_KEY_REVOKED');
  const fresh = await chat(node.baseURL, laterKey.secret, 'on v2');
  t.equal(fresh.status, 200);
  await fresh.arrayBuffer();
  t.equal(newUpstream.requests.length, 1, 'new requests go to the new upstream');
  t.equal(oldUpstream.requests.length, 1);

  const lines = await waitFor(() => {
    const finished = node.logs().filter((l) => l.msg === 'request finished');
    return finished.length === 3 ? finished : undefined;
  }, { what: 'three request log lines' });
  t.same(
    lines.map((l) => [l.keyId, l.status, l.configVersion]),
    [['k1', 200, 1], ['k1', 401, 2], ['k2', 200, 2]],
    'each request is logged with the config version it was served on',
  );
});

t.test('a stream running during a swap that removes its route runs to its end', async (t) => {
  const upstream = await startFakeUpstream(t, { chunkDelayMs: 100 });
  const key = newCallerKey();
  const v1 = fromBundle(testBundle({ nodeId: 'n', version: 1, upstreamUrl: upstream.url, keys: [bundleKey('k1', key.sha256)] }));
  const v2 = fromBundle(testBundle({ nodeId: 'n', version: 2, upstreamUrl: upstream.url, keys: [bundleKey('k1', key.sha256)], routes: [], upstreams: [] }));
  const node = await startNode(t, ConfigHolder.ready(v1));

  const res = await chat(node.baseURL, key.secret, 'a long answer that streams in several chunks', true);
  t.equal(res.status, 200);
  const reader = res.body!.getReader();
  const first = await reader.read();
  t.notOk(first.done, 'the stream has started');
  node.holder.swap(v2);
  let text = Buffer.from(first.value ?? new Uint8Array()).toString('utf8');
  for (;;) {
    const next = await reader.read();
    if (next.done) break;
    text += Buffer.from(next.value).toString('utf8');
  }
  t.match(text, /data: \[DONE\]/, 'the stream ended normally');
  t.notMatch(text, /ZN_ERR_/, 'without an error event');
  const after = await chat(node.baseURL, key.secret, 'x');
  t.equal(after.status, 404, 'the removed alias is gone for the next request');
});

t.test('a request that arrived before a swap is authenticated and routed on the config it arrived with, even when the swap lands before its body is read', async (t) => {
  const oldUpstream = await startFakeUpstream(t);
  const newUpstream = await startFakeUpstream(t);
  const key = newCallerKey();
  const v1 = fromBundle(testBundle({ nodeId: 'n', version: 1, upstreamUrl: oldUpstream.url, keys: [bundleKey('k1', key.sha256)] }));
  const v2 = fromBundle(testBundle({ nodeId: 'n', version: 2, upstreamUrl: newUpstream.url, keys: [bundleKey('k1', key.sha256, { status: 'revoked' })] }));
  const holder = ConfigHolder.ready(v1);
  const app = await buildApp({ holder, logger: createLogger({ level: 'silent' }) });
  // Test instrumentation: hold the request after its onRequest hooks (snapshot, authentication)
  // and before its body is parsed and routed, until the test has swapped the config.
  let arrived: () => void = () => undefined;
  const hasArrived = new Promise<void>((resolve) => (arrived = resolve));
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => (release = resolve));
  app.addHook('preParsing', async () => {
    arrived();
    await released;
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const { port } = app.server.address() as AddressInfo;

  const pending = chat(`http://127.0.0.1:${port}/v1`, key.secret, 'arrived on v1');
  await hasArrived;
  holder.swap(v2);
  release();
  const res = await pending;
  t.equal(res.status, 200, 'not refused by the revocation that came after it arrived');
  t.equal(((await res.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]?.message.content, `${ECHO}arrived on v1`);
  t.equal(oldUpstream.requests.length, 1, "routed to version 1's upstream");
  t.equal(newUpstream.requests.length, 0);
  const next = await chat(`http://127.0.0.1:${port}/v1`, key.secret, 'after');
  t.equal(next.status, 401, 'the next request sees version 2');
});
