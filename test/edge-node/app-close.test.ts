// Closing the node's app (on SIGTERM, after which serve waits for it) drains requests in flight and
// does not wait for connections that never sent a request: Node's closeIdleConnections() leaves
// those to its headers timeout, which held close() for about 70 s.
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { testBundle } from './config-fixtures.js';
import { waitFor } from '../fixtures/wait-for.js';

t.test('a connection that never sent a request is closed at once when the app closes; one whose request is in flight is drained', async (t) => {
  const holder = ConfigHolder.ready(fromBundle(testBundle({ nodeId: 'node-1', version: 1, upstreamUrl: 'http://127.0.0.1:9/v1', keys: [] })));
  const app = await buildApp({ holder, logger: createLogger({ level: 'silent' }) });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  let requests = 0;
  app.server.on('request', () => (requests += 1));

  const spare = connect(port, '127.0.0.1');
  let spareClosed = false;
  spare.on('error', () => undefined).on('close', () => (spareClosed = true));
  await new Promise<void>((resolve) => spare.once('connect', () => resolve()));

  // A request whose headers have arrived but whose body has not: in flight while the app closes.
  const busy = connect(port, '127.0.0.1');
  let answer = '';
  let busyClosed = false;
  busy
    .on('data', (chunk: Buffer) => (answer += chunk.toString('utf8')))
    .on('error', () => undefined)
    .on('close', () => (busyClosed = true));
  await new Promise<void>((resolve) => busy.once('connect', () => resolve()));
  busy.write('POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n');
  await waitFor(() => requests === 1 || undefined, { what: 'the request to be in flight' });

  let closed = false;
  const closing = app.close().then(() => (closed = true));
  await waitFor(() => spareClosed || undefined, { what: 'the spare connection closed by the node', timeoutMs: 10_000 });
  t.equal(closed, false, 'close waits for the request in flight');
  busy.write('{}');
  await waitFor(() => closed || undefined, { what: 'close to finish once the request is answered', timeoutMs: 10_000 });
  await closing;
  // close() resolves once the server has written the answer; this socket may read it a moment later.
  await waitFor(() => answer.includes('\r\n\r\n') || busyClosed || undefined, { what: 'the answer to be read (or the connection to end without one)', timeoutMs: 10_000 });
  t.match(answer, /^HTTP\/1\.1 400 [^]*x-request-id: req_/, 'the request in flight was answered (an empty chat request: 400)');
  busy.destroy();
});
