// A small HTTPS control plane for enrollment tests: real TLS with a throwaway CA, answering
// GET /api/enroll/preflight and POST /api/enroll as the issue-3 contract says, with knobs per test.
import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import https from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PROTOCOL_VERSION } from '../../proto/src/index.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';
import type { IssuedCert, ServerCertNames, TestCa } from '../fixtures/tls.js';

export interface Answer {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

export interface EnrollServerOptions {
  /** The CA that signs the server certificate (a fresh one by default). */
  ca?: TestCa;
  names?: ServerCertNames;
  preflight?: () => Answer;
  enroll?: (body: unknown) => Answer;
  /** The node id the default answer names (a new random one per answer by default). */
  nodeId?: () => string;
}

export interface EnrollServer {
  /** https://127.0.0.1:PORT */
  url: string;
  port: number;
  ca: TestCa;
  /** The gateway CA the default answer hands out. */
  gatewayCa: TestCa;
  /** Every request seen: method, path and the parsed JSON body of POSTs. */
  requests: Array<{ method: string; path: string; body: unknown }>;
  /** The credential the default answer issued last (to check it is never printed). */
  lastCredential(): string | undefined;
}

export const CONFIG_SIGNING_PUBLIC_KEY_PEM = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();

export function tokenErrorAnswer(status: number, code: string, message: string, headers?: Record<string, string>): Answer {
  return { status, body: { error: { message, type: 'invalid_request_error', code } }, ...(headers !== undefined ? { headers } : {}) };
}

export function preflightAnswer(overrides: Record<string, unknown> = {}): Answer {
  const now = Date.now();
  return {
    status: 200,
    body: { product: 'zenova-gateway', version: '0.1.0', protocolVersion: PROTOCOL_VERSION, serverTime: new Date(now).toISOString(), serverTimeMs: now, redemptionKeys: true, ...overrides },
  };
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

export async function startEnrollServer(t: { teardown(fn: () => unknown): void }, opts: EnrollServerOptions = {}): Promise<EnrollServer> {
  const ca = opts.ca ?? (await createTestCa());
  const identity: IssuedCert = await issueServerCert(ca, opts.names ?? { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
  const gatewayCa = await createTestCa();
  const requests: EnrollServer['requests'] = [];
  let lastCredential: string | undefined;
  let url = '';

  const defaultEnroll = (): Answer => {
    const id = randomUUID();
    lastCredential = `${id}.${randomBytes(32).toString('base64url')}`;
    return {
      status: 200,
      body: {
        nodeId: opts.nodeId?.() ?? randomUUID(),
        nodeName: 'edge-1',
        credential: { id, secret: lastCredential, expiresAt: new Date(Date.now() + 30 * 86_400_000).toISOString() },
        gateway: { target: '127.0.0.1:8443', serverName: 'localhost', caPem: gatewayCa.certPem },
        configSigningPublicKeyPem: CONFIG_SIGNING_PUBLIC_KEY_PEM,
        controlPlaneUrl: url,
      },
    };
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = (req.url ?? '').split('?', 1)[0] ?? '';
    const text = req.method === 'POST' ? await readBody(req) : '';
    let body: unknown;
    try {
      body = text === '' ? undefined : JSON.parse(text);
    } catch {
      body = text;
    }
    requests.push({ method: req.method ?? '', path, body });
    let answer: Answer;
    if (req.method === 'GET' && path === '/api/enroll/preflight') answer = (opts.preflight ?? preflightAnswer)();
    else if (req.method === 'POST' && path === '/api/enroll') answer = opts.enroll ? opts.enroll(body) : defaultEnroll();
    else answer = tokenErrorAnswer(404, 'ZN_ERR_CP_NOT_FOUND', 'no route');
    res.writeHead(answer.status, { 'content-type': 'application/json', ...answer.headers });
    res.end(JSON.stringify(answer.body));
  };

  const server = https.createServer({ key: identity.keyPem, cert: identity.certPem }, (req, res) => {
    handle(req, res).catch(() => res.destroy());
  });
  // A client that drops the handshake (untrusted certificate) is expected here, not a failure.
  server.on('tlsClientError', () => undefined);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  const { port } = server.address() as AddressInfo;
  url = `https://127.0.0.1:${port}`;
  return { url, port, ca, gatewayCa, requests, lastCredential: () => lastCredential };
}
