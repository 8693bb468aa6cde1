import t from 'tap';
import { createDemoUpstream } from '../../control-plane/src/dev-stack/demo-upstream.js';

t.test('the demo upstream logs method, path and status but never the caller headers or body', async (t) => {
  const logged = t.capture(console, 'log');
  const upstream = createDemoUpstream({ logRequests: true });
  t.teardown(() => upstream.close());
  const { url, port } = await upstream.listen(0, '127.0.0.1');
  t.equal(url, `http://127.0.0.1:${port}/v1`);
  const res = await fetch(`${url}/chat/completions`, {
    method: 'POST',
    headers: { authorization: 'Bearer sk-very-secret-upstream-key', 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'demo-echo', messages: [{ role: 'user', content: 'my password is hunter2' }] }),
  });
  t.equal(res.status, 200);
  await res.json();
  const lines = logged.args().map((args) => args.map(String).join(' '));
  t.equal(lines.length, 1);
  t.match(JSON.parse(lines[0]!), { msg: 'demo upstream request', method: 'POST', path: '/v1/chat/completions', status: 200 });
  t.notMatch(lines.join('\n'), /sk-very-secret|hunter2/);
  t.equal(upstream.requests[0]?.headers.authorization, 'Bearer sk-very-secret-upstream-key', 'still recorded for tests');
});

t.test('a demo upstream made with logRequests off prints nothing', async (t) => {
  const logged = t.capture(console, 'log');
  const upstream = createDemoUpstream();
  t.teardown(() => upstream.close());
  const { url } = await upstream.listen();
  await (await fetch(`${url}/models`)).json();
  t.same(logged.args(), []);
});

t.test('an oversized body is refused with 413', async (t) => {
  const upstream = createDemoUpstream();
  t.teardown(() => upstream.close());
  const { url } = await upstream.listen();
  const res = await fetch(`${url}/embeddings`, { method: 'POST', body: JSON.stringify({ model: 'demo-embed', input: 'x'.repeat(5 * 1024 * 1024) }) });
  t.equal(res.status, 413);
  t.match(await res.json(), { error: { message: /exceeds/, type: 'invalid_request_error' } });
});
