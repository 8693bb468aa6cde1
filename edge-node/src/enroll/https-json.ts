/**
 * A minimal HTTPS JSON client for enrollment: certificate verification always on (with the given
 * CA, or the system store), a whole-request deadline, and a cap on the response size.
 */
import https from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';

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

export function requestJson(req: JsonRequest): Promise<JsonResponse> {
  const payload = req.body === undefined ? undefined : Buffer.from(JSON.stringify(req.body));
  return new Promise<JsonResponse>((resolve, reject) => {
    const request = https.request(
      req.url,
      {
        method: req.method,
        // Stated outright: Node's default follows NODE_TLS_REJECT_UNAUTHORIZED, and a 0 left in the
        // environment would otherwise hand the install token and the trust to pin to anyone on the path.
        rejectUnauthorized: true,
        ...(req.caPem !== undefined ? { ca: req.caPem } : {}),
        // One-off connection: no agent pooling of a connection made with a custom CA.
        agent: false,
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
