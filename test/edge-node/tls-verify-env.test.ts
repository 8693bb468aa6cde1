// NODE_TLS_REJECT_UNAUTHORIZED=0 left in a node host's environment (a dev shell, a proxy recipe)
// turns off Node's certificate check for every TLS client that does not state rejectUnauthorized
// itself. The node's clients state it: enrollment (which would hand the install token and the trust
// to pin to anyone on the path), the gateway probe, upstream calls (which carry upstream secrets) and
// tool-server calls each refuse a certificate their trust does not vouch for, whatever the variable says.
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { requestJson } from '../../edge-node/src/enroll/https-json.js';
import { probeTls } from '../../edge-node/src/control/gateway-probe.js';
import { AbortSwitch } from '../../edge-node/src/pipeline/abort-switch.js';
import { callToolServer } from '../../edge-node/src/providers/mcp/tool-server-call.js';
import { UpstreamPool } from '../../edge-node/src/upstream/upstream-pool.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';

async function untrustedServer(t: { teardown(fn: () => unknown): void }): Promise<{ port: number; hits: () => number; trustedCaPem: string }> {
  const serverCa = await createTestCa();
  const otherCa = await createTestCa();
  const cert = await issueServerCert(serverCa, { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
  let hits = 0;
  const server = https.createServer({ cert: cert.certPem, key: cert.keyPem }, (req, res) => {
    hits += 1;
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { port: (server.address() as AddressInfo).port, hits: () => hits, trustedCaPem: otherCa.certPem };
}

t.test('with NODE_TLS_REJECT_UNAUTHORIZED=0 the node\'s TLS clients still refuse a certificate their trust does not vouch for', async (t) => {
  const previous = process.env.NODE_TLS_REJECT_UNAUTHORIZED;
  process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';
  t.teardown(() => {
    if (previous === undefined) delete process.env.NODE_TLS_REJECT_UNAUTHORIZED;
    else process.env.NODE_TLS_REJECT_UNAUTHORIZED = previous;
  });
  const server = await untrustedServer(t);
  const base = `https://127.0.0.1:${server.port}`;

  await t.rejects(
    requestJson({ method: 'POST', url: new URL(`${base}/api/enroll`), body: { token: 'zn_it_secret' }, caPem: server.trustedCaPem, timeoutMs: 5000, maxResponseBytes: 4096 }),
    'enrollment refuses it (with the CA passed by --ca-file)',
  );
  await t.rejects(
    requestJson({ method: 'GET', url: new URL(`${base}/api/version`), timeoutMs: 5000, maxResponseBytes: 4096 }),
    'and with the system trust store',
  );

  const probe = await probeTls({ target: `127.0.0.1:${server.port}`, serverName: '127.0.0.1', caPem: server.trustedCaPem }, 5000);
  t.equal(probe.ok, false, 'the gateway probe refuses it');

  const pool = new UpstreamPool();
  t.teardown(() => pool.close());
  const upstream = { name: 'tls-upstream', kind: 'openai' as const, baseUrl: `${base}/v1`, apiKey: 'sk-upstream-secret', timeoutMs: 5000 };
  await t.rejects(pool.request(upstream, { method: 'GET', path: '/models', requestId: 'req_tls', signal: new AbortSwitch() }), 'an upstream call refuses it');

  await t.rejects(
    callToolServer({ name: 'tls-tools', url: `${base}/mcp`, apiKey: 'tool-secret', timeoutMs: 5000, callMicros: 0 }, { method: 'POST', callerHeaders: {}, body: '{}', requestId: 'req_tls_tools', signal: new AbortSwitch() }),
    'a tool-server call refuses it',
  );
  t.equal(server.hits(), 0, 'no request (token, secret or bearer) reached the server');
});
