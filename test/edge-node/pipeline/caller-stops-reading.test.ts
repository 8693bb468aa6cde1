// A caller that stops reading a streamed answer without closing its connection: backpressure holds
// the upstream, but without a bound the request (its upstream call, concurrency slot and
// reservation) would stay open for as long as the caller likes. After callerStallMs without the
// socket draining, the node drops the connection and the request ends as a caller that left.
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { waitFor } from '../../fixtures/wait-for.js';
import { startPipelineNode } from './pipeline-harness.js';

/** An upstream that streams chat chunks as fast as its socket takes them, until its caller goes. */
async function floodingUpstream(t: { teardown(fn: () => unknown): void }): Promise<{ url: string; aborted: () => boolean }> {
  let aborted = false;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const content = 'lorem ipsum '.repeat(300);
      const chunk = `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'demo-echo', choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;
      // Bounded: at most 64 MiB, far more than the socket buffers between here and the caller hold.
      let written = 0;
      const pump = (): void => {
        while (!res.destroyed && written < 64 * 1024 * 1024) {
          written += chunk.length;
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
        res.end();
      };
      res.on('close', () => {
        if (!res.writableFinished) aborted = true;
      });
      pump();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, aborted: () => aborted };
}

t.test('a caller that stops reading a stream is dropped after the stall limit, the upstream call aborted and the request recorded as aborted with its partial usage', async (t) => {
  const upstream = await floodingUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, callerStallMs: 300 });
  const { port } = new URL(node.origin);
  const socket = net.connect(Number(port), '127.0.0.1');
  socket.on('error', () => undefined);
  t.teardown(() => socket.destroy());
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  const body = JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'hi' }] });
  socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: n\r\nAuthorization: Bearer ${node.secret}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  // Never read: the socket stays open and its buffers fill.
  socket.pause();

  const finished = await waitFor(() => node.finished[0], { what: 'the stalled request to finish', timeoutMs: 20_000 });
  t.equal(finished.outcome.status, 'aborted', 'recorded as a caller that left');
  t.ok(finished.usage.outputTokens > 0, 'the output it was sent is metered');
  await waitFor(() => upstream.aborted() || undefined, { what: 'the upstream call to be aborted', timeoutMs: 20_000 });
  // Read on now: past what the buffers held, the connection the node dropped comes to its end.
  socket.resume();
  await closed;
  t.ok(node.logs().some((l) => l.msg === 'caller stopped reading the answer; its connection is closed' && l.stallMs === 300), 'a log line says why');
});

t.test('a stream whose caller stopped reading is ended by the node\'s stop and recorded failed ZN_ERR_NODE_STOPPING while the caller still holds its connection, not left until the sockets close', async (t) => {
  const upstream = await floodingUpstream(t);
  // A stall limit far past the test: only the stop can end the wait.
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, callerStallMs: 600_000 });
  const { port } = new URL(node.origin);
  let answer: http.ServerResponse | undefined;
  node.app.server.once('request', (_req: http.IncomingMessage, res: http.ServerResponse) => (answer = res));
  const socket = net.connect(Number(port), '127.0.0.1');
  socket.on('error', () => undefined);
  t.teardown(() => socket.destroy());
  let text = '';
  socket.on('data', (chunk: Buffer) => (text = (text + chunk.toString('latin1')).slice(-4096)));
  const body = JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'hi' }] });
  socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: n\r\nAuthorization: Bearer ${node.secret}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  socket.pause();
  // The node's answer took no more: it waits for its caller to read on.
  await waitFor(() => answer?.writableNeedDrain || undefined, { what: 'the node to wait for its caller', timeoutMs: 20_000 });

  void node.app.inFlight.stopAll(60_000);
  const finished = await waitFor(() => node.finished[0], { what: 'the stopped request to finish', timeoutMs: 20_000 });
  t.equal(socket.destroyed, false, 'the caller still holds its connection');
  t.match(finished.outcome, { status: 'failed', errorCode: 'ZN_ERR_NODE_STOPPING' }, 'recorded as ended by the node, not as a caller that left');
  t.ok(finished.usage.outputTokens > 0, 'the output it was sent is metered');
  await waitFor(() => upstream.aborted() || undefined, { what: 'the upstream call to be aborted', timeoutMs: 20_000 });
  // Read on: after what the buffers held comes the stream's error event.
  socket.resume();
  await waitFor(() => text.includes('"code":"ZN_ERR_NODE_STOPPING"') || undefined, { what: 'the error event', timeoutMs: 20_000 });
  t.pass('the caller that reads on gets the error event');
});

/** An upstream whose chat answer is JSON of `contentBytes` characters, more than the sockets between node and caller hold. */
async function largeJsonUpstream(t: { teardown(fn: () => unknown): void }, contentBytes: number): Promise<{ url: string }> {
  const answer = JSON.stringify({
    id: 'c',
    object: 'chat.completion',
    created: 1,
    model: 'demo-echo',
    choices: [{ index: 0, message: { role: 'assistant', content: 'x'.repeat(contentBytes) }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  });
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(answer);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1` };
}

t.test('a caller that stops reading a JSON answer is dropped after the stall limit, so the answer held for it is let go, and the request line says the node closed it', async (t) => {
  const upstream = await largeJsonUpstream(t, 24 * 1024 * 1024);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, callerStallMs: 300 });
  const { port } = new URL(node.origin);
  const socket = net.connect(Number(port), '127.0.0.1');
  socket.on('error', () => undefined);
  t.teardown(() => socket.destroy());
  let received = 0;
  socket.on('data', (chunk: Buffer) => (received += chunk.length));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  const body = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] });
  socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: n\r\nAuthorization: Bearer ${node.secret}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  // Never read: the answer stays in the node's socket buffer.
  socket.pause();

  const line = await waitFor(() => node.logs().find((l) => l.msg === 'request finished'), { what: 'the stalled request\'s line', timeoutMs: 20_000 });
  t.equal(line.closedByNode, 'caller stopped reading', 'the line says the node closed the connection, and why');
  t.equal(line.status, 200);
  t.ok(node.logs().some((l) => l.msg === 'caller stopped reading the answer; its connection is closed' && l.stallMs === 300), 'a log line says why');
  // Read on now: what the kernel buffers held arrives, then the end of the connection the node dropped.
  socket.resume();
  await closed;
  t.ok(received < 24 * 1024 * 1024, 'the answer was cut, not delivered');
});
