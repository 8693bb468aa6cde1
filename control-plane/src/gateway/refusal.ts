/**
 * How a refusal leaves the gateway: the `Refusal` message the node reads first, and the gRPC status
 * that ends the call ("CODE: message" in its details, so a node that lost the message still knows).
 */
import * as grpc from '@grpc/grpc-js';
import { PROTOCOL_VERSION, isRefusalRetryable, type ControlMessage, type RefusalCode } from '../../../proto/src/index.js';

export interface CallStatus { code: grpc.status; details: string }

// gRPC status per refusal code (issue 3 contract): credential problems and a deleted node are
// UNAUTHENTICATED, a protocol mismatch FAILED_PRECONDITION, transient server states UNAVAILABLE.
const STATUS_BY_CODE: Record<RefusalCode, grpc.status> = {
  CREDENTIAL_MISSING: grpc.status.UNAUTHENTICATED,
  CREDENTIAL_INVALID: grpc.status.UNAUTHENTICATED,
  CREDENTIAL_EXPIRED: grpc.status.UNAUTHENTICATED,
  CREDENTIAL_REVOKED: grpc.status.UNAUTHENTICATED,
  CREDENTIAL_SUPERSEDED: grpc.status.UNAUTHENTICATED,
  NODE_DELETED: grpc.status.UNAUTHENTICATED,
  PROTOCOL_INCOMPATIBLE: grpc.status.FAILED_PRECONDITION,
  HELLO_REQUIRED: grpc.status.FAILED_PRECONDITION,
  SERVER_SHUTTING_DOWN: grpc.status.UNAVAILABLE,
  MESSAGE_INVALID: grpc.status.INVALID_ARGUMENT,
  SESSION_REPLACED: grpc.status.ABORTED,
  SERVER_UNAVAILABLE: grpc.status.UNAVAILABLE,
};

// Status details travel in an HTTP/2 trailer; keep them well inside header size limits.
const MAX_MESSAGE_CHARS = 1_000;

export function refusalStatus(code: RefusalCode, message: string): CallStatus {
  return { code: STATUS_BY_CODE[code], details: `${code}: ${message.slice(0, MAX_MESSAGE_CHARS)}` };
}

export function refusalMessage(code: RefusalCode, message: string): ControlMessage {
  return {
    refusal: {
      error: { code, message: message.slice(0, MAX_MESSAGE_CHARS), retryable: isRefusalRetryable(code) },
      serverProtocolVersion: PROTOCOL_VERSION,
    },
  };
}
