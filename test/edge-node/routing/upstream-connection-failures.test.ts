// Failures below HTTP on the way to an upstream: a TLS handshake the node refuses (a certificate it
// does not trust, an https:// base URL on a plain HTTP port) and other network errors undici or the
// socket report are the upstream's fault, like a refused connection: retried, counted by target
// health, fallen back from, and when last a 502 that names the problem; never "Internal error".
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { TargetHealth } from '../../../edge-node/src/routing/target-health.js';
import { classifyUpstreamFailure } from '../../../edge-node/src/upstream/upstream-failure.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { startRawUpstream } from '../../fixtures/raw-upstream.js';
import { createTestCa, issueServerCert } from '../../fixtures/tls.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';

/** An HTTPS upstream whose certificate an internal CA issued: no trust store the node uses vouches for it. */
async function untrustedUpstream(t: { teardown(fn: () => unknown): void }): Promise<{ url: string; hits: () => number }> {
  const cert = await issueServerCert(await createTestCa(), { ipAddresses: ['127.0.0.1'] });
  let hits = 0;
  const server = https.createServer({ cert: cert.certPem, key: cert.keyPem }, (req, res) => {
    hits += 1;
    req.resume();
    res.writeHead(500).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, hits: () => hits };
}

const ask = (model: string) => ({ model, messages: [{ role: 'user', content: 'hi' }] });

t.test('an upstream the node cannot talk TLS to falls back, counts against the target, and alone answers 502 naming the problem', async (t) => {
  const backup = await startFakeUpstream(t);
  const plain = await startFakeUpstream(t);
  const tls = await untrustedUpstream(t);
  const health = new TargetHealth({ failureThreshold: 2 });
  const upstreams = [
    { id: 'up-t', name: 'internal-tls', kind: 'openai-compatible' as const, baseUrl: tls.url, apiKey: 'sk-tls-upstream-secret', timeoutMs: 5000 },
    { id: 'up-w', name: 'wrong-scheme', kind: 'openai-compatible' as const, baseUrl: plain.url.replace('http://', 'https://'), apiKey: 'sk-scheme-upstream-secret', timeoutMs: 5000 },
  ];
  const route = (alias: string, upstream: string, fallbacks: string[]) => ({
    alias,
    targets: [{ upstream, model: 'demo-echo', weight: 1 }],
    fallbacks: fallbacks.map((name) => ({ upstream: name, model: 'demo-echo' })),
    timeoutMs: 5000,
    retries: 0,
  });
  const node = await startPipelineNode(t, {
    upstreamUrl: backup.url,
    bundle: (base) => ({
      upstreams: [...base.upstreams, ...upstreams],
      routes: [route('tls-fb', 'internal-tls', ['demo']), route('tls-only', 'internal-tls', []), route('scheme-only', 'wrong-scheme', [])],
    }),
    services: { targetHealth: health },
  });
  const call = async (alias: string) => {
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${node.secret}`, 'content-type': 'application/json' },
      body: JSON.stringify(ask(alias)),
    });
    const text = await res.text();
    const done = node.finished.find((f) => f.requestId === res.headers.get('x-request-id'));
    return { status: res.status, retry: res.headers.get('x-should-retry'), text, body: JSON.parse(text) as { error?: { code: string; message: string } }, done };
  };

  const backupBefore = backup.requests.length;
  const fellBack = await call('tls-fb');
  t.equal(fellBack.status, 200, 'the fallback answered');
  t.equal(backup.requests.length - backupBefore, 1);
  t.match(fellBack.done?.attempts, [{ upstream: 'internal-tls', outcome: 'connect', httpStatus: null }, { upstream: 'demo', outcome: 'ok' }]);

  const untrusted = await call('tls-only');
  t.equal(untrusted.status, 502);
  t.equal(untrusted.retry, 'true');
  t.equal(untrusted.body.error?.code, 'ZN_ERR_UPSTREAM_UNAVAILABLE');
  t.match(untrusted.body.error?.message, /^Upstream "internal-tls" could not be reached: its TLS certificate is not trusted by this node \(UNABLE_TO_VERIFY_LEAF_SIGNATURE\)\.$/);
  t.notMatch(untrusted.text, /sk-tls-upstream-secret|127\.0\.0\.1/, 'neither the upstream key nor its address in the answer');
  t.equal(tls.hits(), 0, 'no request reached the untrusted server');
  const target = { upstream: { name: 'internal-tls', kind: 'openai-compatible' as const, baseUrl: tls.url, apiKey: undefined, timeoutMs: 5000 }, upstreamModel: 'demo-echo', weight: 1 };
  t.ok(health.isEjected(target), 'two TLS failures in a row eject the target');

  const wrongScheme = await call('scheme-only');
  t.equal(wrongScheme.status, 502);
  t.equal(wrongScheme.body.error?.code, 'ZN_ERR_UPSTREAM_UNAVAILABLE');
  t.match(wrongScheme.body.error?.message, /^Upstream "wrong-scheme" could not be reached: it did not answer in TLS \(an https:\/\/ base URL on a plain HTTP port\?\) \([A-Z_]+\)\.$/);
  t.notMatch(wrongScheme.text, /sk-scheme-upstream-secret/);
  t.notOk(node.logs().some((l) => l.msg === 'request failed' && (l.level as number) >= 50), 'no failure logged as an internal error');
});

t.test('an upstream whose headers overflow what undici reads answers 502 ZN_ERR_UPSTREAM_UNAVAILABLE, not an internal error', async (t) => {
  const raw = await startRawUpstream(t, (socket) => {
    socket.end(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-padding: ${'a'.repeat(256 * 1024)}\r\ncontent-length: 2\r\n\r\n{}`);
  });
  const node = await startPipelineNode(t, { upstreamUrl: raw.url });
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${node.secret}`, 'content-type': 'application/json' },
    body: JSON.stringify(ask('echo')),
  });
  const body = (await res.json()) as { error: { code: string; message: string } };
  t.equal(res.status, 502);
  t.equal(body.error.code, 'ZN_ERR_UPSTREAM_UNAVAILABLE');
  t.match(body.error.message, /\(UND_ERR_HEADERS_OVERFLOW\)/);
});

t.test('TLS and network error codes are upstream failures; an error without a network code stays internal', async (t) => {
  const coded = (code: string, message = 'x') => Object.assign(new Error(message), { code });
  const cases: Array<[unknown, string, RegExp?]> = [
    [coded('CERT_HAS_EXPIRED'), 'ZN_ERR_UPSTREAM_UNAVAILABLE', /certificate has expired or is not yet valid \(CERT_HAS_EXPIRED\)/],
    [coded('ERR_TLS_CERT_ALTNAME_INVALID'), 'ZN_ERR_UPSTREAM_UNAVAILABLE', /certificate does not name the host of its base URL/],
    [coded('UNABLE_TO_VERIFY_LEAF_SIGNATURE'), 'ZN_ERR_UPSTREAM_UNAVAILABLE', /certificate is not trusted/],
    [coded('EPROTO'), 'ZN_ERR_UPSTREAM_UNAVAILABLE', /did not answer in TLS/],
    [new TypeError('fetch failed', { cause: coded('ERR_SSL_WRONG_VERSION_NUMBER') }), 'ZN_ERR_UPSTREAM_UNAVAILABLE', /did not answer in TLS/],
    [coded('ECONNABORTED'), 'ZN_ERR_UPSTREAM_UNAVAILABLE', /\(ECONNABORTED\)/],
    [coded('UND_ERR_HEADERS_OVERFLOW'), 'ZN_ERR_UPSTREAM_UNAVAILABLE', /\(UND_ERR_HEADERS_OVERFLOW\)/],
    [coded('DEPTH_ZERO_SELF_SIGNED_CERT', 'self-signed certificate'), 'ZN_ERR_UPSTREAM_UNAVAILABLE', /certificate is not trusted/],
    [coded('INVALID_PURPOSE', 'unsuitable certificate purpose'), 'ZN_ERR_UPSTREAM_UNAVAILABLE', /certificate was refused \(INVALID_PURPOSE\)/],
    [coded('ERR_SSL_SSLV3_ALERT_HANDSHAKE_FAILURE'), 'ZN_ERR_UPSTREAM_UNAVAILABLE'],
    [new Error('cannot read properties of undefined'), 'ZN_ERR_INTERNAL'],
    [coded('ERR_INVALID_ARG_TYPE'), 'ZN_ERR_INTERNAL'],
    [coded('UND_ERR_INVALID_ARG'), 'ZN_ERR_INTERNAL'],
  ];
  for (const [err, code, message] of cases) {
    const failure = classifyUpstreamFailure(err, 'up');
    const seen = (err as { code?: string }).code ?? (err as Error).message;
    t.equal(failure.code, code, seen);
    if (message !== undefined) t.match(failure.message, message, seen);
  }
});
