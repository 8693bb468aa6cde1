/**
 * The node's errors in Anthropic's shape, so the official SDK raises its typed errors
 * (AuthenticationError, NotFoundError, …) and still sees our code: `error.code` (as on the
 * OpenAI surface) and `error.details.error_code`, which the SDK exposes as `APIError.errorCode`
 * (an unknown code just leaves the error at its status class).
 */
import type { ErrorCode, ZenovaError } from '../../errors.js';
import { errorTable } from '../../errors.js';

export interface AnthropicErrorBody {
  type: 'error';
  error: { type: string; message: string; code: ErrorCode; details: { error_code: ErrorCode } };
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
  return anthropicErrorBody(error.code, error.message, error.status);
}
