// The loopback-only admin port answers only requests whose Host names a loopback host (127.0.0.0/8,
// localhost, [::1], with or without a port): a web page that points its own name at 127.0.0.1 (DNS
// rebinding) gets 421 and never reads /metrics.
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import { isLoopbackHostHeader, startAdminServer } from '../../../edge-node/src/metrics/admin-server.js';

function get(url: string, path: string, host: string): Promise<{ status: number; body: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    http
      .get({ host: hostname, port, path, headers: { host } }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

t.test('loopback Host headers are told apart from every other name', async (t) => {
  for (const host of ['127.0.0.1', '127.0.0.1:9100', '127.8.9.10:1', 'localhost', 'LOCALHOST:9100', '[::1]', '[::1]:9100', '[::ffff:127.0.0.1]:9100', 'localhost.', 'localhost.:9100', '127.0.0.1.']) t.ok(isLoopbackHostHeader(host), host);
  for (const host of [undefined, '', 'attacker.example', 'attacker.example:9100', 'localhost.attacker.example', '127.0.0.1.nip.io', '10.0.0.5:9100', '::1', '[::1', '[::1]x', '127.0.0.1:x', 'localhost:9100:1', '0.0.0.0:9100', '.', 'attacker.example.']) {
    t.notOk(isLoopbackHostHeader(host), String(host));
  }
});

t.test('the admin port refuses /metrics and /healthz to a request addressed to another name with 421, and serves loopback names', async (t) => {
  const admin = await startAdminServer({ host: '127.0.0.1', port: 0, renderMetrics: () => 'secret_metric 1\n' });
  t.teardown(() => admin.close());
  const port = new URL(admin.url).port;
  for (const path of ['/metrics', '/healthz']) {
    const refused = await get(admin.url, path, `attacker.example:${port}`);
    t.equal(refused.status, 421, path);
    t.match(refused.body, /loopback host/);
    t.notMatch(refused.body, /secret_metric/);
  }
  for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, 'localhost', `[::1]:${port}`]) {
    const served = await get(admin.url, '/metrics', host);
    t.equal(served.status, 200, host);
    t.equal(served.body, 'secret_metric 1\n');
  }
});

t.test('an HTTP/1.1 request without a Host header gets the admin port\'s 421, not a bare 400', async (t) => {
  const admin = await startAdminServer({ host: '127.0.0.1', port: 0, renderMetrics: () => 'secret_metric 1\n' });
  t.teardown(() => admin.close());
  const { hostname, port } = new URL(admin.url);
  const answer = await new Promise<string>((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () => socket.end('GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n'));
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('end', () => resolve(text));
    socket.on('error', reject);
  });
  t.match(answer, /^HTTP\/1\.1 421 /);
  t.match(answer, /loopback host/);
  t.notMatch(answer, /secret_metric/);
});
