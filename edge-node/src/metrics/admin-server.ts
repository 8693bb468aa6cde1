/**
 * The node's admin port: GET /metrics (Prometheus text) and GET /healthz, on a loopback address
 * only. Metrics name upstreams, keys' limits and traffic; they are for the host, never the network,
 * so any other address is refused at start-up rather than trusted to a firewall. In a replica of
 * `serve --replicas K` the supervisor holds the port and this process answers its scrapes over IPC
 * instead (replica-admin.ts).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { PROMETHEUS_CONTENT_TYPE } from './prometheus-registry.js';
import { answerMetricsOverIpc, replicaIndex } from './replica-admin.js';
import { isLoopbackHost, isLoopbackHostHeader } from '../../../proto/src/loopback-host.js';

export { isLoopbackHost, isLoopbackHostHeader };

export interface AdminServer {
  url: string;
  close(): Promise<void>;
}

export interface AdminServerOptions {
  host: string;
  port: number;
  /** The /metrics body, built at each scrape. */
  renderMetrics: () => string | Promise<string>;
  /**
   * GET /readyz (the supervisor of replicas: every replica ready): 200 when ready, else 503, with
   * `body` as JSON. Absent: no /readyz here (a single node answers it on its caller port).
   */
  readiness?: () => Promise<{ ready: boolean; body: unknown }>;
}

/** The admin port was asked to listen somewhere other than loopback. */
export class AdminListenRefusedError extends Error {
  constructor(host: string) {
    super(
      `the admin port (metrics) listens only on a loopback address such as 127.0.0.1 or [::1], not ${JSON.stringify(host)}: ` +
        'metrics are for this host; scrape them locally or through an agent on the host',
    );
    this.name = 'AdminListenRefusedError';
  }
}

function urlOf(host: string, port: number): string {
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** What the admin port serves, for the 404. */
function servedPaths(opts: AdminServerOptions): string {
  return opts.readiness !== undefined ? '/metrics, /healthz and /readyz' : '/metrics and /healthz';
}

export async function startAdminServer(opts: AdminServerOptions): Promise<AdminServer> {
  if (!isLoopbackHost(opts.host)) throw new AdminListenRefusedError(opts.host);
  if (replicaIndex() !== undefined) {
    // The supervisor listens there and asks this replica for its text; binding it here would make
    // cluster share the port among the replicas, each scrape reaching one of them.
    const render = opts.renderMetrics;
    const stop = answerMetricsOverIpc(() => {
      const text = render();
      if (typeof text !== 'string') throw new Error('a replica renders its metrics synchronously');
      return text;
    });
    return { url: urlOf(opts.host, opts.port), close: async () => stop() };
  }
  // requireHostHeader off: an HTTP/1.1 request without Host gets this handler's 421, as documented, not Node's bare 400.
  const server = http.createServer({ requireHostHeader: false }, (req, res) => {
    if (!isLoopbackHostHeader(req.headers.host)) {
      res
        .writeHead(421, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' })
        .end('misdirected request: the admin port answers only requests addressed to a loopback host (Host: 127.0.0.1, localhost or [::1])\n');
      return;
    }
    const path = (req.url ?? '/').split('?', 1)[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' }).end('method not allowed\n');
      return;
    }
    if (path === '/metrics') {
      let body: string | Promise<string>;
      try {
        body = opts.renderMetrics();
      } catch {
        res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('metrics could not be rendered\n');
        return;
      }
      const send = (text: string): void => {
        res.writeHead(200, { 'content-type': PROMETHEUS_CONTENT_TYPE, 'cache-control': 'no-store' }).end(req.method === 'HEAD' ? undefined : text);
      };
      if (typeof body === 'string') send(body);
      else body.then(send, () => res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('metrics could not be rendered\n'));
      return;
    }
    if (path === '/readyz' && opts.readiness !== undefined) {
      opts.readiness().then(
        ({ ready, body }) =>
          res
            .writeHead(ready ? 200 : 503, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' })
            .end(req.method === 'HEAD' ? undefined : `${JSON.stringify(body)}\n`),
        () => res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('readiness could not be read\n'),
      );
      return;
    }
    if (path === '/healthz') {
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end('ok\n');
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end(`not found: the admin port serves ${servedPaths(opts)}\n`);
  });
  // Scrapes are small; a slow or idle client must not hold the port.
  server.requestTimeout = 10_000;
  server.headersTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: opts.host, port: opts.port }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: urlOf(opts.host, port),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
