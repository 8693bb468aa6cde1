// The bench's load-generator client must read answers exactly, or the bench counts wrong: every
// framing the targets use, bodies split at any byte, connections the server closes.
import { createServer } from 'node:net';
import type { AddressInfo, Socket } from 'node:net';
import http from 'node:http';
import t from 'tap';
import { RawHttpConnection, requestBytes } from './raw-http-client.js';

const BODY = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'héllo' }] });

async function listen(server: http.Server | ReturnType<typeof createServer>): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

t.test('a keep-alive server answering with content-length is read request after request on one socket', async (t) => {
  const seen: string[] = [];
  const sockets = new Set<unknown>();
  const server = http.createServer((req, res) => {
    sockets.add(req.socket);
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      seen.push(`${req.method} ${req.url} ${req.headers.authorization} ${body}`);
      res.setHeader('content-length', Buffer.byteLength(body));
      res.end(body);
    });
  });
  const port = await listen(server);
  t.teardown(() => server.close());
  const request = requestBytes(`127.0.0.1:${port}`, '/v1/chat/completions', { authorization: 'Bearer k', 'content-type': 'application/json' }, BODY);
  const connection = new RawHttpConnection(port, '127.0.0.1', request, 5000);
  t.teardown(() => connection.close());
  for (let i = 0; i < 3; i++) t.same(await connection.send(), { status: 200 });
  t.equal(seen.length, 3);
  t.equal(seen[0], `POST /v1/chat/completions Bearer k ${BODY}`);
  t.equal(sockets.size, 1, 'one connection for every request');
});

t.test('a chunked answer split at every byte, and a non-200 answer keeps its body for the error message', async (t) => {
  let status = 200;
  const server = createServer((socket: Socket) => {
    socket.on('data', () => {
      const body = status === 200 ? '{"ok":true}' : '{"error":"nope"}';
      const wire = `HTTP/1.1 ${status} X\r\nTransfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n3\r\nabc\r\n0\r\n\r\n`;
      // One byte per write, spaced by the event loop, so the parser sees every possible split.
      let i = 0;
      const next = (): void => {
        if (i >= wire.length) return;
        socket.write(wire[i++]!);
        setImmediate(next);
      };
      next();
    });
  });
  const port = await listen(server);
  t.teardown(() => server.close());
  const connection = new RawHttpConnection(port, '127.0.0.1', requestBytes('x', '/', {}, '{}'), 5000);
  t.teardown(() => connection.close());
  t.same(await connection.send(), { status: 200 });
  status = 429;
  const refused = await connection.send();
  t.equal(refused.status, 429);
  t.match(refused.errorBody, /nope/);
});

t.test('connection: close ends the socket after the answer and the next request opens a new one', async (t) => {
  let connections = 0;
  const server = createServer((socket: Socket) => {
    connections += 1;
    socket.once('data', () => socket.end('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok'));
  });
  const port = await listen(server);
  t.teardown(() => server.close());
  const connection = new RawHttpConnection(port, '127.0.0.1', requestBytes('x', '/', {}, '{}'), 5000);
  t.teardown(() => connection.close());
  t.same(await connection.send(), { status: 200 });
  t.same(await connection.send(), { status: 200 }, "the first socket's close does not fail the second request");
  t.equal(connections, 2);
});

t.test('a server that closes before the answer ends fails the request instead of hanging', async (t) => {
  const server = createServer((socket: Socket) => {
    socket.once('data', () => socket.end('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort'));
  });
  const port = await listen(server);
  t.teardown(() => server.close());
  const connection = new RawHttpConnection(port, '127.0.0.1', requestBytes('x', '/', {}, '{}'), 5000);
  t.teardown(() => connection.close());
  await t.rejects(connection.send(), /closed before the answer ended/);
});
