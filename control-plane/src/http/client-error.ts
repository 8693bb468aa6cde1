/**
 * Fastify's `clientErrorHandler`: requests Node's HTTP parser refuses (a malformed head, headers
 * over 16 KiB, a bad chunk, a request slower than requestTimeout) never reach routing. Fastify's
 * default answers them in its own body without x-request-id, and logs the error at trace level
 * with its `rawPacket`: the request's raw bytes, admin token and install tokens included. Here
 * only the parser's code is logged, and the answer is ours.
 */
import { randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import type { FastifyBaseLogger } from 'fastify';
import { zenovaError } from '../errors.js';
import type { ErrorCode } from '../errors.js';
import { REQUEST_ID_HEADER } from './request-id.js';

const REASONS: Record<number, string> = { 400: 'Bad Request', 408: 'Request Timeout', 431: 'Request Header Fields Too Large' };

/** Which entry of the error table answers a parser error (by Node's code for it). */
export function clientErrorCode(nodeCode: string | undefined): ErrorCode {
  if (nodeCode === 'ERR_HTTP_REQUEST_TIMEOUT') return 'ZN_ERR_CP_REQUEST_TIMEOUT';
  if (nodeCode === 'HPE_HEADER_OVERFLOW') return 'ZN_ERR_CP_HEADERS_TOO_LARGE';
  return 'ZN_ERR_CP_INVALID_REQUEST';
}

export function clientErrorHandler(logger: FastifyBaseLogger): (err: NodeJS.ErrnoException, socket: Socket) => void {
  // A socket refused once may report more of the bytes behind while its answer waits its turn.
  const refused = new WeakSet<Socket>();
  return (err, socket) => {
    if (refused.has(socket)) return;
    // The client left (a reset, its end before the request was whole): no one to answer.
    if (err.code === 'ECONNRESET' || err.code === 'HPE_INVALID_EOF_STATE' || socket.destroyed) {
      socket.destroy();
      return;
    }
    refused.add(socket);
    const error = clientErrorCode(err.code) === 'ZN_ERR_CP_INVALID_REQUEST'
      ? zenovaError('ZN_ERR_CP_INVALID_REQUEST', 'The HTTP request could not be parsed.')
      : zenovaError(clientErrorCode(err.code));
    const requestId = randomUUID();
    // The code only: the error object carries the request's raw bytes (rawPacket).
    logger.info({ requestId, parserCode: typeof err.code === 'string' ? err.code.slice(0, 64) : undefined, code: error.code }, 'request refused by the HTTP parser');
    const body = JSON.stringify(error.toBody());
    const answer = (): void => {
      if (!socket.writable) {
        socket.destroy();
        return;
      }
      // Closed once the answer is flushed; a peer that never reads it is cut off after 5 s.
      socket.once('finish', () => socket.destroy());
      setTimeout(() => socket.destroy(), 5_000).unref();
      socket.end(
        `HTTP/1.1 ${error.status} ${REASONS[error.status] ?? 'Bad Request'}\r\nConnection: close\r\n` +
          `Content-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nCache-Control: no-store\r\n` +
          `${REQUEST_ID_HEADER}: ${requestId}\r\n\r\n${body}`,
      );
    };
    const inProgress = responseOn(socket);
    if (inProgress == null) {
      answer();
    } else if (!inProgress.req.complete) {
      // The refused bytes are this request's own: answer it, unless its answer has begun.
      if (inProgress.headersSent) afterResponses(socket, () => socket.destroy());
      else answer();
    } else {
      // A request pipelined behind ones still being answered: answered after them, in order, so
      // neither lands inside their answers nor is read as one of them.
      afterResponses(socket, answer);
    }
  };
}

interface InFlightResponse {
  headersSent: boolean;
  req: { complete: boolean };
  once(event: 'finish' | 'close', listener: () => void): unknown;
}

function responseOn(socket: Socket): InFlightResponse | null {
  return (socket as Socket & { _httpMessage?: InFlightResponse | null })._httpMessage ?? null;
}

/**
 * Runs `then` once no response is being written on the socket (Node hands it queued ones in turn),
 * or once the one in turn is the refused request's own (its body never completes: it is answered).
 */
function afterResponses(socket: Socket, then: () => void): void {
  const current = responseOn(socket);
  if (current == null || socket.destroyed || (!current.req.complete && !current.headersSent)) {
    then();
    return;
  }
  let done = false;
  const next = (): void => {
    if (done) return;
    done = true;
    // Node's own 'finish' listener, added first, has by now detached it and assigned the next.
    afterResponses(socket, then);
  };
  current.once('finish', next);
  current.once('close', next);
}
