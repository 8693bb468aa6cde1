// Anyone who reaches the gateway port can open connections and send nothing; held forever, they
// use up the control plane's file descriptors. A connection on which no call opens is cut after a
// bound (one that never finishes its TLS handshake or HTTP/2 preface too), one whose calls have
// ended is closed after the idle bound, and a live node's control stream, an open call, is never
// cut. The bounds are tiny here; the waits are on the sockets closing.
import { readFile } from 'node:fs/promises';
import http2 from 'node:http2';
import net from 'node:net';
import tls from 'node:tls';
import t from 'tap';
import { startGatewayServer } from '../../control-plane/src/gateway/server.js';
import { NodeControlService } from '../../proto/src/index.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import {
  enrolledNode, gatewayIdentity, gatewaySettings, harnessSecretBox, harnessSigningKey, liveSession, migratedPool, type HasTeardown,
} from './gateway-harness.js';
import { captureLogger } from './helpers.js';

const FIRST_CALL_MS = 1_000;
const IDLE_MS = 300;
const DEADLINE_MS = 15_000;

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const identity = await gatewayIdentity();
const settings = gatewaySettings(db.url);
const server = await startGatewayServer({
  pool,
  logger: captureLogger({ logLevel: 'warn' }).logger,
  settings,
  identity,
  signingKey: await harnessSigningKey(pool),
  secretBox: harnessSecretBox,
  firstCallTimeoutMs: FIRST_CALL_MS,
  idleConnectionCloseMs: IDLE_MS,
});
t.teardown(() => server.close());
const port = server.port;

/** Settles once `socket` closed, whichever side closed it; destroyed at teardown if it never does. */
function closedOf(t: HasTeardown, socket: { once(event: 'close', fn: () => void): unknown; destroy(): void }): () => boolean {
  let closed = false;
  socket.once('close', () => { closed = true; });
  t.teardown(() => socket.destroy());
  return () => closed;
}

/**
 * Whether the gateway (this process) still holds its end of the connection from `clientPort` in a
 * file descriptor. Read from /proc/net/tcp: a socket closed by its process while the peer keeps its
 * end shows inode 0. A client that never reads cannot see the gateway close, so this is asked.
 */
async function gatewayHolds(clientPort: number): Promise<boolean> {
  const hexPort = (p: number): string => p.toString(16).toUpperCase().padStart(4, '0');
  const lines = (await readFile('/proc/net/tcp', 'utf8')).split('\n').slice(1);
  return lines.some((line) => {
    const fields = line.trim().split(/\s+/);
    return fields[1]?.endsWith(`:${hexPort(port)}`) === true && fields[2]?.endsWith(`:${hexPort(clientPort)}`) === true && fields[9] !== '0';
  });
}

/** An HTTP/2 connection past its TLS handshake and preface; `closed` says when it closed. */
async function http2Connection(t: HasTeardown): Promise<{ session: http2.ClientHttp2Session; closed: () => boolean }> {
  const session = http2.connect(`https://127.0.0.1:${port}`, { ca: identity.caPem, servername: 'localhost' });
  session.on('error', () => undefined);
  const closed = closedOf(t, session);
  await new Promise<void>((resolve, reject) => {
    session.once('connect', () => resolve());
    session.once('error', reject);
  });
  return { session, closed };
}

/** Opens a Connect call without credentials (refused at once) and waits for it to end. */
async function endedCall(session: http2.ClientHttp2Session): Promise<void> {
  const call = session.request({
    ':method': 'POST', ':path': NodeControlService.connect.path, 'content-type': 'application/grpc', te: 'trailers',
  });
  call.on('error', () => undefined);
  call.resume();
  call.end();
  await new Promise<void>((resolve) => call.once('close', () => resolve()));
}

t.test('an HTTP/2 connection on which no call opens is cut by the gateway', async (t) => {
  const { closed } = await http2Connection(t);
  await waitFor(closed, { timeoutMs: DEADLINE_MS, what: 'the callless HTTP/2 connection to be cut' });
  t.pass('cut');
});

t.test('a connection whose call has ended is closed once it has been idle for the bound', async (t) => {
  const { session, closed } = await http2Connection(t);
  await endedCall(session);
  await waitFor(closed, { timeoutMs: DEADLINE_MS, what: 'the idle HTTP/2 connection to be closed' });
  t.pass('closed');
});

t.test('a TLS connection that never sends its HTTP/2 preface nor reads is cut by the gateway', async (t) => {
  const socket = tls.connect({ host: '127.0.0.1', port, ca: identity.caPem, servername: 'localhost', ALPNProtocols: ['h2'] });
  socket.on('error', () => undefined);
  closedOf(t, socket);
  await new Promise<void>((resolve) => socket.once('secureConnect', () => resolve()));
  t.equal(socket.alpnProtocol, 'h2', 'the handshake agreed on HTTP/2');
  const clientPort = socket.localPort!;
  t.ok(await gatewayHolds(clientPort), 'the gateway holds the connection at first');
  await waitFor(async () => !(await gatewayHolds(clientPort)), { timeoutMs: DEADLINE_MS, what: 'the gateway to let go of the silent TLS connection' });
  t.pass('cut');
});

/** Opens a TCP connection that sends nothing and waits until the gateway cut it (the first-call bound: grpc-js never sees it). */
async function silentTcpCut(t: HasTeardown, what: string): Promise<void> {
  const socket = net.connect({ host: '127.0.0.1', port });
  socket.on('error', () => undefined);
  const closed = closedOf(t, socket);
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  await waitFor(closed, { timeoutMs: DEADLINE_MS, what });
}

t.test('a TCP connection that never starts its TLS handshake is cut by the gateway', async (t) => {
  await silentTcpCut(t, 'the silent TCP connection to be cut');
  t.pass('cut');
});

t.test("a live node's control stream is not cut however long the bounds have passed", async (t) => {
  const node = await enrolledNode(pool, settings);
  const { conn } = await liveSession(t, port, identity.caPem, node);
  // Each of these connections was opened after the session went live and cut once the first-call
  // bound had passed: it has passed twice over since (and the idle bound more), with no message on
  // the node's stream.
  for (let i = 1; i <= 2; i++) await silentTcpCut(t, `silent connection ${i} to be cut`);
  t.equal(server.sessionCount(), 1, 'the node is still live');
  const ended = await Promise.race([conn.status, Promise.resolve(undefined)]);
  t.equal(ended, undefined, "the node's call has not ended");
  t.notOk(conn.received.some((m) => m.refusal !== undefined), 'nor was it refused');
});
