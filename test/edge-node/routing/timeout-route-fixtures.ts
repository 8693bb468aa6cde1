// Shared by the tests of a target that answers too late (headers-timeout-next-target.test.ts,
// stream-headers-timeout-next-target.test.ts): a node whose alias `slow` has a short per-target
// timeout and retries, a request to it, its finished record, and a TLS upstream that never lets a
// request be written (also used by billing/caller-left-before-answer.test.ts).
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { waitFor } from '../../fixtures/wait-for.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import type { FinishedRequest, PipelineNode } from '../pipeline/pipeline-harness.js';

type Teardown = { teardown(fn: () => unknown): void };

export const TIMEOUT_MS = 300;
export const RETRIES = 2;

/** A node whose alias `slow` goes to `primaryUrl` (as "demo"), RETRIES retries, falling back to `backupUrl` ("backup") when given. */
export function slowRouteNode(t: Teardown, primaryUrl: string, backupUrl?: string): Promise<PipelineNode> {
  return startPipelineNode(t, {
    upstreamUrl: primaryUrl,
    bundle: (base) => ({
      upstreams: backupUrl === undefined ? base.upstreams : [...base.upstreams, { id: 'up-b', name: 'backup', kind: 'openai-compatible', baseUrl: backupUrl, apiKey: 'sk-backup', timeoutMs: 30_000 }],
      routes: [
        {
          alias: 'slow',
          targets: [{ upstream: 'demo', model: 'demo-echo', weight: 1 }],
          fallbacks: backupUrl === undefined ? [] : [{ upstream: 'backup', model: 'demo-echo' }],
          timeoutMs: TIMEOUT_MS,
          retries: RETRIES,
        },
      ],
    }),
  });
}

/** A one-message request for alias `slow` to `path`, `body` merged over it. */
export function askSlow(node: PipelineNode, body: Record<string, unknown> = {}, path = '/v1/chat/completions'): Promise<Response> {
  return fetch(`${node.origin}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'slow', messages: [{ role: 'user', content: 'hi' }], ...body }),
    signal: AbortSignal.timeout(10_000),
  });
}

/** The node's record of the request `res` answered, once it finished. */
export function finishedOf(node: PipelineNode, res: Response): Promise<FinishedRequest> {
  const id = res.headers.get('x-request-id');
  return waitFor(() => node.finished.find((f) => f.requestId === id), { what: 'the request to finish' });
}

/** A TLS upstream whose handshake never finishes: the node's connect times out and no request is ever written. */
export async function silentTlsUpstream(): Promise<{ url: string; connections: () => number; release: () => void }> {
  const sockets = new Set<net.Socket>();
  let connections = 0;
  const server = net.createServer((socket) => {
    connections += 1;
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const release = (): void => {
    for (const socket of sockets) socket.destroy();
    server.close();
  };
  return { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, connections: () => connections, release };
}
