/**
 * Connections that have not sent a request yet (a browser's speculative socket, a client's or a
 * balancer's spare one, a TLS handshake never finished). Node's closeIdleConnections() does not
 * count them as idle and leaves them to its headers or request timeout, so a server closing
 * gracefully waited a minute or more for them, past both processes' shutdown deadlines. Shared by
 * the node's and the control plane's HTTP servers, as the guardrail regex rule is: runtime code
 * both sides need alike.
 */
import type { Socket } from 'node:net';

export interface UnusedConnections {
  /**
   * Destroys every connection that has not sent a request, and any that opens from now on (the
   * server is closing). Nothing was served on them: a request whose headers were still arriving is
   * reset, and its client may send it again.
   */
  close(): void;
}

interface ConnectionEvents {
  on(event: 'connection', listener: (socket: Socket) => void): unknown;
  on(event: 'request', listener: (request: { socket: Socket }) => void): unknown;
}

/** Keyed by the peer's address and port: over TLS a request's socket wraps the TCP one the server counts. */
const peerOf = (socket: Socket): string => `${socket.remoteAddress ?? ''}|${socket.remotePort ?? ''}`;

export function trackUnusedConnections(server: ConnectionEvents): UnusedConnections {
  const unused = new Map<string, Socket>();
  let closing = false;
  server.on('connection', (socket) => {
    if (closing) {
      socket.destroy();
      return;
    }
    const peer = peerOf(socket);
    unused.set(peer, socket);
    socket.once('close', () => {
      if (unused.get(peer) === socket) unused.delete(peer);
    });
  });
  server.on('request', (request) => unused.delete(peerOf(request.socket)));
  return {
    close: () => {
      closing = true;
      for (const socket of unused.values()) socket.destroy();
      unused.clear();
    },
  };
}
