/**
 * The control plane's error table, one entry per code (fastify's FST_ERR_* style). Every error a
 * client can see comes from here: HTTP status, OpenAI-style body `{error:{message,type,param,code}}` and
 * whether retrying can help. Codes are prefixed ZN_ERR_CP_ so they never collide with the node's.
 * docs/errors.md lists the same codes; a test keeps the two in step.
 */

/** OpenAI-style `error.type` values. */
export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'conflict_error'
  | 'rate_limit_error'
  | 'api_error';

export interface ErrorSpec {
  status: number;
  type: ErrorType;
  /** Default client-facing message; a call site may give a more specific one. */
  message: string;
  retryable: boolean;
}

export const errorTable = {
  ZN_ERR_CP_NOT_FOUND: {
    status: 404,
    type: 'not_found_error',
    message: 'No such route.',
    retryable: false,
  },
  ZN_ERR_CP_INVALID_REQUEST: {
    status: 400,
    type: 'invalid_request_error',
    message: 'The request is malformed.',
    retryable: false,
  },
  ZN_ERR_CP_HEADERS_TOO_LARGE: {
    status: 431,
    type: 'invalid_request_error',
    message: 'The request headers are too large (over 16 KiB); send fewer or shorter headers.',
    retryable: false,
  },
  ZN_ERR_CP_REQUEST_TIMEOUT: {
    status: 408,
    type: 'invalid_request_error',
    message: 'The request took too long to arrive (over 60 s); send it again.',
    retryable: true,
  },
  ZN_ERR_CP_UNSUPPORTED_MEDIA_TYPE: {
    status: 415,
    type: 'invalid_request_error',
    message: 'Unsupported content type; send application/json.',
    retryable: false,
  },
  ZN_ERR_CP_BODY_TOO_LARGE: {
    status: 413,
    type: 'invalid_request_error',
    message: 'The request body is larger than this route accepts; send less.',
    retryable: false,
  },
  ZN_ERR_CP_UNAUTHENTICATED: {
    status: 401,
    type: 'authentication_error',
    message: 'Missing or invalid admin bearer token.',
    retryable: false,
  },
  ZN_ERR_CP_CSRF: {
    status: 403,
    type: 'permission_error',
    message: 'Missing or wrong x-zenova-csrf header: a console request that changes something must carry the CSRF token of its session; reload the console and try again.',
    retryable: false,
  },
  ZN_ERR_CP_LOGIN_RATE_LIMITED: {
    status: 429,
    type: 'rate_limit_error',
    message: 'Too many failed admin token attempts from this address; wait and try again.',
    retryable: true,
  },
  ZN_ERR_CP_NODE_NOT_FOUND: {
    status: 404,
    type: 'not_found_error',
    message: 'No node with that name.',
    retryable: false,
  },
  ZN_ERR_CP_NODE_NAME_TAKEN: {
    status: 409,
    type: 'conflict_error',
    message: 'A node with that name already exists.',
    retryable: false,
  },
  ZN_ERR_CP_NODE_CENTRAL: {
    status: 409,
    type: 'conflict_error',
    message: 'office-primary is the central node, installed with the control plane; once it has enrolled it cannot be deleted.',
    retryable: false,
  },
  ZN_ERR_CP_ACCOUNT_NOT_FOUND: {
    status: 404,
    type: 'not_found_error',
    message: 'No account with that name.',
    retryable: false,
  },
  ZN_ERR_CP_API_KEY_NOT_FOUND: {
    status: 404,
    type: 'not_found_error',
    message: 'No API key with that id.',
    retryable: false,
  },
  ZN_ERR_CP_UPSTREAM_NOT_FOUND: {
    status: 404,
    type: 'not_found_error',
    message: 'No upstream with that name.',
    retryable: false,
  },
  ZN_ERR_CP_ROUTE_NOT_FOUND: {
    status: 404,
    type: 'not_found_error',
    message: 'No model route with that alias.',
    retryable: false,
  },
  ZN_ERR_CP_POLICY_NOT_FOUND: {
    status: 404,
    type: 'not_found_error',
    message: 'No policy with that name.',
    retryable: false,
  },
  ZN_ERR_CP_PRICE_NOT_FOUND: {
    status: 404,
    type: 'not_found_error',
    message: 'No price for that model.',
    retryable: false,
  },
  ZN_ERR_CP_TOOL_SERVER_NOT_FOUND: {
    status: 404,
    type: 'not_found_error',
    message: 'No tool server with that name.',
    retryable: false,
  },
  ZN_ERR_CP_NAME_TAKEN: {
    status: 409,
    type: 'conflict_error',
    message: 'That name is already in use.',
    retryable: false,
  },
  ZN_ERR_CP_PRECONDITION_FAILED: {
    status: 412,
    type: 'conflict_error',
    message: 'The object changed since it was read (its ETag no longer matches If-Match); nothing was written or deleted. Re-read it and, if the change still applies, send the request again with its new ETag.',
    retryable: false,
  },
  ZN_ERR_CP_UPSTREAM_IN_USE: {
    status: 409,
    type: 'conflict_error',
    message: 'The upstream is used by a model route; change or delete the route first.',
    retryable: false,
  },
  ZN_ERR_CP_POLICY_IN_USE: {
    status: 409,
    type: 'conflict_error',
    message: 'The policy is used by an account or API key; detach it first.',
    retryable: false,
  },
  ZN_ERR_CP_CREDIT_REFERENCE_USED: {
    status: 409,
    type: 'conflict_error',
    message: 'The reference was already used by a top-up of this account with another amount; send a new reference for a new top-up.',
    retryable: false,
  },
  ZN_ERR_CP_IDEMPOTENT_REPLAY: {
    status: 409,
    type: 'conflict_error',
    message: 'An earlier request with this Idempotency-Key and body already created the API key; its secret cannot be shown again. Revoke that key if its secret was lost, and create a new one with a new Idempotency-Key.',
    retryable: false,
  },
  ZN_ERR_CP_IDEMPOTENCY_KEY_REUSED: {
    status: 422,
    type: 'invalid_request_error',
    message: 'The Idempotency-Key was already used with another request body; a retry sends the same body, a new request a new Idempotency-Key.',
    retryable: false,
  },
  ZN_ERR_CP_IDEMPOTENCY_KEY_INVALID: {
    status: 400,
    type: 'invalid_request_error',
    message: 'The Idempotency-Key header must be 1 to 255 printable ASCII characters, sent once.',
    retryable: false,
  },
  ZN_ERR_CP_CONFIG_LIMIT: {
    status: 409,
    type: 'conflict_error',
    message: 'The change would take the config past what a node\'s config bundle can hold; delete something first.',
    retryable: false,
  },
  ZN_ERR_CP_SECRETS_UNAVAILABLE: {
    status: 503,
    type: 'api_error',
    message: 'This control plane process has no ZENOVA_SECRET_ENC_KEY, so it cannot store provider secrets.',
    retryable: false,
  },
  ZN_ERR_CP_TOKEN_UNKNOWN: {
    status: 401,
    type: 'authentication_error',
    message: 'The install token is not known to this control plane; check it was copied whole and that the command targets the control plane that issued it.',
    retryable: false,
  },
  ZN_ERR_CP_TOKEN_EXPIRED: {
    status: 401,
    type: 'authentication_error',
    message: 'The install token has expired; issue a new command for the node and run that.',
    retryable: false,
  },
  ZN_ERR_CP_TOKEN_SUPERSEDED: {
    status: 401,
    type: 'authentication_error',
    message: 'The token was replaced by a newer command for the node; run the newest command.',
    retryable: false,
  },
  ZN_ERR_CP_TOKEN_USED: {
    status: 409,
    type: 'conflict_error',
    message: 'The install token was already used; issue a new command for the node and run that.',
    retryable: false,
  },
  ZN_ERR_CP_TOKEN_WRONG_KIND: {
    status: 400,
    type: 'invalid_request_error',
    message: 'The token is of another kind than the command needs.',
    retryable: false,
  },
  ZN_ERR_CP_TOKEN_WRONG_NODE: {
    status: 403,
    type: 'permission_error',
    message: "The token was issued for another node than the one installed on this host; issue the command for this host's node.",
    retryable: false,
  },
  ZN_ERR_CP_UPGRADE_VERSION: {
    status: 409,
    type: 'conflict_error',
    message: "The node package is not of this control plane's version; upgrade with the zenova-node.zpkg of the control plane's version.",
    retryable: false,
  },
  ZN_ERR_CP_NODE_DELETED: {
    status: 410,
    type: 'not_found_error',
    message: 'The node this token was issued for has been deleted; create the node again and use its new command.',
    retryable: false,
  },
  ZN_ERR_CP_PROTOCOL_INCOMPATIBLE: {
    status: 400,
    type: 'invalid_request_error',
    message: 'The node speaks a control protocol this control plane does not; install the node package of the control plane\'s version.',
    retryable: false,
  },
  ZN_ERR_CP_ENROLL_RATE_LIMITED: {
    status: 429,
    type: 'rate_limit_error',
    message: 'Too many enrollment attempts from this address; wait and try again.',
    retryable: true,
  },
  ZN_ERR_CP_ENROLLMENT_UNAVAILABLE: {
    status: 503,
    type: 'api_error',
    message: 'This control plane does not run a node gateway, so it cannot enroll nodes; enroll against one that does.',
    retryable: false,
  },
  ZN_ERR_CP_DATABASE_UNAVAILABLE: {
    status: 503,
    type: 'api_error',
    message: 'The control plane database is unavailable; try again shortly.',
    retryable: true,
  },
  ZN_ERR_CP_INTERNAL: {
    status: 500,
    type: 'api_error',
    message: 'Internal error in the control plane.',
    retryable: false,
  },
} as const satisfies Record<`ZN_ERR_${string}`, ErrorSpec>;

export type ErrorCode = keyof typeof errorTable;

export interface ErrorBody {
  /** `param`: the first offending field of a schema refusal (`name`, `targets[0].weight`), else null — as OpenAI's and the node's bodies. */
  error: { message: string; type: ErrorType; param: string | null; code: ErrorCode };
}

export class ZenovaError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** Fastify reads `statusCode`, so an error that escapes our handler still gets the right status. */
  readonly statusCode: number;
  readonly type: ErrorType;
  readonly retryable: boolean;

  constructor(code: ErrorCode, message?: string, options?: { cause?: unknown }) {
    const spec: ErrorSpec = errorTable[code];
    super(message ?? spec.message, options);
    this.name = 'ZenovaError';
    this.code = code;
    this.status = spec.status;
    this.statusCode = spec.status;
    this.type = spec.type;
    this.retryable = spec.retryable;
  }

  /** `param`: the offending field, which the error handler reads from a schema refusal (error-handler.ts paramOf). */
  toBody(param: string | null = null): ErrorBody {
    // An internal error's own message may carry internals; clients only ever see the table's text.
    const message = this.code === 'ZN_ERR_CP_INTERNAL' ? errorTable.ZN_ERR_CP_INTERNAL.message : this.message;
    return { error: { message, type: this.type, param, code: this.code } };
  }
}

export function zenovaError(code: ErrorCode, message?: string, options?: { cause?: unknown }): ZenovaError {
  return new ZenovaError(code, message, options);
}

export function isZenovaError(err: unknown): err is ZenovaError {
  return err instanceof ZenovaError;
}
