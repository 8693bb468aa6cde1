/**
 * The node's errors in Anthropic's shape, so the official SDK raises its typed errors
 * (AuthenticationError, NotFoundError, …) and still sees our code: `error.code` (as on the
 * OpenAI surface) and `error.details.error_code`, which the SDK exposes as `APIError.errorCode`
 * (an unknown code just leaves the error at its status class).
 */
import type { ErrorCode } from '../../errors.js';
import { ZenovaError, errorTable } from '../../errors.js';
import { upstreamCodeOf, upstreamErrorTypeStatus } from '../../upstream/upstream-failure.js';

export interface AnthropicErrorBody {
  type: 'error';
  /** `upstream_code`: the upstream's own code, for an upstream error that blames the request (UpstreamStatusError). */
  error: { type: string; message: string; code: ErrorCode; details: { error_code: ErrorCode }; upstream_code?: string };
}

/** Anthropic's error `type` for an HTTP status (their documented table). */
export function anthropicErrorType(status: number): string {
  switch (status) {
    case 400:
      return 'invalid_request_error';
    case 401:
      return 'authentication_error';
    case 402:
      return 'billing_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 504:
      return 'timeout_error';
    case 529:
      return 'overloaded_error';
  }
  return status >= 500 ? 'api_error' : 'invalid_request_error';
}

export function anthropicErrorBody(code: ErrorCode, message: string, status: number = errorTable[code].status): AnthropicErrorBody {
  return { type: 'error', error: { type: anthropicErrorType(status), message, code, details: { error_code: code } } };
}

export function anthropicErrorBodyOf(error: ZenovaError): AnthropicErrorBody {
  const body = anthropicErrorBody(error.code, error.message, error instanceof FirstEventErrorAnswer ? error.upstreamTypeStatus : error.status);
  const upstreamCode = upstreamCodeOf(error);
  if (upstreamCode !== undefined) body.error.upstream_code = upstreamCode;
  return body;
}

/** An error firstEventErrorAnswer made: its body's type is the one its upstream's error `type` stands for. */
class FirstEventErrorAnswer extends ZenovaError {
  constructor(
    error: ZenovaError,
    overrides: { status: number; type: string },
    /** The status the upstream's error `type` stands for (ERROR_TYPE_STATUS, upstream-failure.ts). */
    readonly upstreamTypeStatus: number,
  ) {
    super(error.code, error.message, { ...overrides, retryable: error.retryable, logMessage: error.logMessage });
  }
}

/**
 * The status an error the upstream reported in band as its stream's first event is answered with,
 * as an upstream HTTP error of the status its `type` stands for would be (upstreamStatusError): a
 * rate_limit_error 429, an error that blames the request (invalid_request_error 400,
 * not_found_error 404, …) that 4xx, an overloaded_error, api_error or timeout_error 502. undefined
 * when it has no such type (authentication_error and permission_error, the node's own key, stay
 * the node's 502; an unknown type), or when its numeric `code` or `status` judged its retry
 * otherwise than that status would (it stays the 502 it was).
 */
export function firstEventErrorStatus(error: ZenovaError): number | undefined {
  const typeStatus = upstreamErrorTypeStatus(error);
  if (typeStatus === undefined) return undefined;
  if (typeStatus >= 500) return 502;
  // A 429 is retryable, another 4xx final: the same verdict as the error's own (upstreamStreamError).
  return (typeStatus === 429) === error.retryable ? typeStatus : undefined;
}

/**
 * The answer to an error the upstream reported in band as its stream's first event, when it ends
 * the plan (nothing reached the caller): the status firstEventErrorStatus gives, and in the body
 * the upstream's own type (overloaded_error, …), as a mid-stream error event keeps it
 * (errorStreamEvent), rather than the 502 api_error of the node. `error` itself for any other error.
 */
export function firstEventErrorAnswer(error: ZenovaError): ZenovaError {
  const status = firstEventErrorStatus(error);
  const typeStatus = upstreamErrorTypeStatus(error);
  if (status === undefined || typeStatus === undefined) return error;
  const type = status === 429 ? 'rate_limit_error' : status < 500 ? 'invalid_request_error' : error.type;
  return new FirstEventErrorAnswer(error, { status, type }, typeStatus);
}
