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
  return (err, socket) => {
    // The client left (a reset, its end before the request was whole): no one to answer.
    if (err.code === 'ECONNRESET' || err.code === 'HPE_INVALID_EOF_STATE' || socket.destroyed) {
      socket.destroy();
      return;
    }
    const error = clientErrorCode(err.code) === 'ZN_ERR_CP_INVALID_REQUEST'
      ? zenovaError('ZN_ERR_CP_INVALID_REQUEST', 'The HTTP request could not be parsed.')
      : zenovaError(clientErrorCode(err.code));
    const requestId = randomUUID();
    // The code only: the error object carries the request's raw bytes (rawPacket).
    logger.info({ requestId, parserCode: typeof err.code === 'string' ? err.code.slice(0, 64) : undefined, code: error.code }, 'request refused by the HTTP parser');
    // A request pipelined behind one still being answered: an answer now would land inside that one's.
    const inProgress = (socket as Socket & { _httpMessage?: { headersSent: boolean } | null })._httpMessage;
    if (socket.writable && (inProgress == null || !inProgress.headersSent)) {
      const body = JSON.stringify(error.toBody());
      socket.write(
        `HTTP/1.1 ${error.status} ${REASONS[error.status] ?? 'Bad Request'}\r\nConnection: close\r\n` +
          `Content-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
          `${REQUEST_ID_HEADER}: ${requestId}\r\n\r\n${body}`,
      );
    }
    socket.destroy();
  };
}
