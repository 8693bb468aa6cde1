/**
 * Serves the console/API Fastify app on ZENOVA_LISTEN: HTTPS with ZENOVA_TLS_CERT_FILE/KEY_FILE,
 * plain HTTP otherwise. buildApp never knows which: for HTTPS we own the node:https server and hand
 * each request to the app's router, so the app factory stays transport-agnostic.
 */
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readBoundedRegularFile } from '../fs/bounded-file.js';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { ListenAddress } from '../settings.js';
import { clientErrorHandler } from '../http/client-error.js';
import { keyMatchesCert, splitPemCertificates } from './self-signed.js';
import { trackUnusedConnections } from '../../../proto/src/index.js';

// Same guards fastify applies to its own server (see app.ts): slow clients cannot hold sockets.
const REQUEST_TIMEOUT_MS = 60_000;
const KEEP_ALIVE_TIMEOUT_MS = 72_000;

export interface ConsoleTls { certPem: string; keyPem: string }

export class ConsoleTlsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConsoleTlsError';
  }
}

function readSetting(variable: string, file: string): string {
  try {
    return readBoundedRegularFile(file);
  } catch (err) {
    throw new ConsoleTlsError(`${variable}: cannot read ${file}: ${(err as Error).message}`);
  }
}

/** Reads and checks the console certificate and key, each problem naming its variable. */
export function readConsoleTls(files: { certFile: string; keyFile: string }, now = new Date()): ConsoleTls {
  const certPem = readSetting('ZENOVA_TLS_CERT_FILE', files.certFile);
  const keyPem = readSetting('ZENOVA_TLS_KEY_FILE', files.keyFile);
  let leaf: string | undefined;
  try {
    leaf = splitPemCertificates(certPem)[0];
  } catch {
    leaf = undefined;
  }
  if (leaf === undefined) throw new ConsoleTlsError(`ZENOVA_TLS_CERT_FILE: ${files.certFile} holds no readable PEM certificate`);
  try {
    createPrivateKey(keyPem);
  } catch {
    throw new ConsoleTlsError(`ZENOVA_TLS_KEY_FILE: ${files.keyFile} is not a readable PEM private key (an encrypted key is not supported)`);
  }
  if (!keyMatchesCert(leaf, keyPem)) {
    throw new ConsoleTlsError(`ZENOVA_TLS_KEY_FILE: ${files.keyFile} is not the private key of the certificate in ZENOVA_TLS_CERT_FILE (${files.certFile})`);
  }
  const validTo = new Date(new X509Certificate(leaf).validTo);
  if (validTo.getTime() <= now.getTime()) {
    throw new ConsoleTlsError(`ZENOVA_TLS_CERT_FILE: the certificate in ${files.certFile} expired on ${validTo.toISOString()}`);
  }
  return { certPem, keyPem };
}

export interface ConsoleListener {
  /** http(s)://HOST:PORT with the real bound port. */
  url: string;
  /** Stops accepting, lets requests in flight finish, closes the app. */
  close(): Promise<void>;
}

function urlFor(scheme: 'http' | 'https', address: AddressInfo): string {
  const host = address.family === 'IPv6' || address.address.includes(':') ? `[${address.address}]` : address.address;
  return `${scheme}://${host}:${address.port}`;
}

export async function listenConsole(app: FastifyInstance, listen: ListenAddress, tls: ConsoleTls | undefined): Promise<ConsoleListener> {
  if (!tls) {
    const unused = trackUnusedConnections(app.server);
    await app.listen({ host: listen.host, port: listen.port });
    const close = async (): Promise<void> => {
      const closed = app.close();
      unused.close();
      await closed;
    };
    return { url: urlFor('http', app.server.address() as AddressInfo), close };
  }
  await app.ready();
  const server = https.createServer({
    cert: tls.certPem,
    key: tls.keyPem,
    requestTimeout: REQUEST_TIMEOUT_MS,
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
  }, (req, res) => app.routing(req, res));
  // fastify installs this on a server it creates (app.ts); this one is ours, so it is ours to add,
  // or a refused head would get Node's bare 400/431 with no code and no x-request-id.
  server.on('clientError', clientErrorHandler(app.log));
  const unused = trackUnusedConnections(server);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(listen.port, listen.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    url: urlFor('https', server.address() as AddressInfo),
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      // A browser's spare connection would otherwise hold close() past the shutdown deadline.
      unused.close();
      // The app first: from now on it answers 503 with `connection: close`, so keep-alive clients let go.
      await app.close();
      await closed;
    },
  };
}
