// What the MCP GET event stream tests share: a bare tool server with one session whose GET streams
// the test shapes (held open, pushing), and the raw initialize a caller without the SDK sends.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A tool server on 127.0.0.1:0 with one session: every POST is answered as an initialize naming
 * `session`, a GET is handed to `onGet` (the event stream the test wants), anything else gets 405.
 * It closes, its open streams first, when the test ends. Returns its MCP endpoint (…/mcp).
 */
export async function startOneSessionToolServer(
  t: { teardown(fn: () => unknown): void },
  session: string,
  onGet: (res: http.ServerResponse) => void,
): Promise<string> {
  const server = http.createServer((req, res) => {
    if (req.method === 'POST') {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': session });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { protocolVersion: '2025-06-18', capabilities: {}, serverInfo: { name: 'one-session', version: '1' } } }));
      });
      return;
    }
    if (req.method === 'GET') {
      onGet(res);
      return;
    }
    res.writeHead(405).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    // A GET stream the test left open would hold close() forever.
    server.closeAllConnections();
    server.close();
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
}

/** The initialize request a raw caller (no SDK) posts to the node's tools surface, with its key in `auth`. */
export function postInitialize(url: string, auth: Record<string, string>): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }),
  });
}
