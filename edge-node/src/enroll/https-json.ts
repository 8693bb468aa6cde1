/**
 * A minimal HTTPS JSON client for enrollment: certificate verification always on (with the given
 * CA, or the system store), a whole-request deadline, and a cap on the response size. Goes through
 * the proxy of https_proxy / HTTPS_PROXY unless no_proxy / NO_PROXY exempts the host
 * (net/proxy-policy.ts), with the same TLS checks over the tunnel.
 */
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import type { Duplex } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import { proxyFor } from '../net/proxy-policy.js';
import type { ProxyServer } from '../net/proxy-policy.js';
import { openTunnel } from '../net/proxy-tunnel.js';

export interface JsonRequest {
  method: 'GET' | 'POST';
  url: URL;
  body?: unknown;
  /** PEM of the CA(s) to trust instead of the system store. */
  caPem?: string;
  timeoutMs: number;
  maxResponseBytes: number;
}

export interface JsonResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** Parsed JSON, or undefined when the body was empty or not JSON. */
  body: unknown;
}

/** The response was larger than allowed, or did not arrive in time. */
export class ResponseProblem extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ResponseProblem';
  }
}

function portOf(url: URL): number {
  return url.port === '' ? 443 : Number(url.port);
}

/** TLS to the URL's host through the proxy: the checks https.request would make on a direct socket. */
function tunnelledTls(proxy: ProxyServer, req: JsonRequest, done: (err: Error | null, socket: Duplex) => void): undefined {
  const host = req.url.hostname.replace(/^\[|\]$/g, '');
  openTunnel(proxy, host, portOf(req.url), req.timeoutMs).then(
    (socket) => {
      const secure = tls.connect({
        socket,
        // The name the certificate must carry; SNI only for a DNS name (RFC 6066).
        host,
        ...(net.isIP(host) === 0 ? { servername: host } : {}),
        rejectUnauthorized: true,
        ...(req.caPem !== undefined ? { ca: req.caPem } : {}),
      });
      done(null, secure);
    },
    (err: Error) => done(err, undefined as unknown as Duplex),
  );
  // undefined: the connection arrives through `done`, once the tunnel is open.
  return undefined;
}

export function requestJson(req: JsonRequest): Promise<JsonResponse> {
  const payload = req.body === undefined ? undefined : Buffer.from(JSON.stringify(req.body));
  // Read before the request starts: a bad proxy setting rejects the call, it does not go direct.
  let proxy: ProxyServer | undefined;
  try {
    proxy = proxyFor(req.url.hostname, portOf(req.url));
  } catch (err) {
    return Promise.reject(err instanceof Error ? err : new Error(String(err)));
  }
  return new Promise<JsonResponse>((resolve, reject) => {
    const request = https.request(
      req.url,
      {
        method: req.method,
        // Stated outright: Node's default follows NODE_TLS_REJECT_UNAUTHORIZED, and a 0 left in the
        // environment would otherwise hand the install token and the trust to pin to anyone on the path.
        rejectUnauthorized: true,
        ...(req.caPem !== undefined ? { ca: req.caPem } : {}),
        // One-off connection: no agent pooling of a connection made with a custom CA (through a
        // proxy, no agent at all: createConnection then builds the one connection).
        ...(proxy !== undefined ? { createConnection: (_options: unknown, done: (err: Error | null, socket: Duplex) => void) => tunnelledTls(proxy, req, done) } : { agent: false }),
        headers: {
          accept: 'application/json',
          ...(payload !== undefined ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {}),
        },
      },
      (response) => {
        const chunks: Buffer[] = [];
        let size = 0;
        response.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > req.maxResponseBytes) {
            request.destroy(new ResponseProblem(`the answer was larger than ${req.maxResponseBytes} bytes`));
            return;
          }
          chunks.push(chunk);
        });
        response.on('end', () => {
          clearTimeout(timer);
          const text = Buffer.concat(chunks).toString('utf8');
          let body: unknown;
          try {
            body = text === '' ? undefined : (JSON.parse(text) as unknown);
          } catch {
            body = undefined;
          }
          resolve({ status: response.statusCode ?? 0, headers: response.headers, body });
        });
        response.on('error', (err) => {
          clearTimeout(timer);
          reject(err);
        });
      },
    );
    const timer = setTimeout(() => request.destroy(new ResponseProblem(`no answer within ${req.timeoutMs} ms`)), req.timeoutMs);
    request.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    request.end(payload);
  });
}
