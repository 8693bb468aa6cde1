// The node's error table: every error a caller can see has one code here, fastify FST_ERR style.
// The lead generates docs/errors.md from `errorTable`, and a test keeps the two in step.
// Control-plane codes are ZN_ERR_CP_*; the node never uses that prefix.

/** What one code means on the wire. `type` is the OpenAI error `type` the SDKs switch on. */
export interface ErrorSpec {
  status: number;
  type: string;
  message: string;
  retryable: boolean;
  /** The request parameter the code is always about, as OpenAI's error `param` names it. */
  param?: string;
}

export const errorTable = {
  ZN_ERR_NOT_FOUND: {
    status: 404,
    type: 'invalid_request_error',
    message: 'No such route.',
    retryable: false,
  },
  ZN_ERR_INVALID_JSON: {
    status: 400,
    type: 'invalid_request_error',
    message: 'The request body is not valid JSON.',
    retryable: false,
  },
  ZN_ERR_INVALID_REQUEST: {
    status: 400,
    type: 'invalid_request_error',
    message: 'The request is invalid.',
    retryable: false,
  },
  ZN_ERR_FILE_ID_NOT_ALLOWED: {
    // A file_id names a file in the operator's upstream account, which every caller of the node
    // shares: passed on, one caller could have the model read another's upload. `param` names the field.
    status: 400,
    type: 'invalid_request_error',
    message: "The request names an uploaded file by its file_id; files in the upstream provider's account are shared by every caller of this node, so they are not passed on. Send the file's content instead.",
    retryable: false,
  },
  ZN_ERR_BODY_TOO_LARGE: {
    status: 413,
    type: 'invalid_request_error',
    message: 'The request body is larger than this node accepts.',
    retryable: false,
  },
  ZN_ERR_BODY_TOO_DEEP: {
    status: 400,
    type: 'invalid_request_error',
    message: 'The request body nests objects and arrays deeper than this node accepts.',
    retryable: false,
  },
  ZN_ERR_UNSUPPORTED_ENCODING: {
    status: 415,
    type: 'invalid_request_error',
    message: 'The request body has a Content-Encoding this node does not accept; send it uncompressed.',
    retryable: false,
  },
  ZN_ERR_MISDIRECTED_REQUEST: {
    status: 421,
    type: 'invalid_request_error',
    message: 'This node serves without API keys, so it answers only requests addressed to a loopback host (Host: 127.0.0.1, localhost or [::1]).',
    retryable: false,
  },
  ZN_ERR_UNSUPPORTED_CHARSET: {
    status: 415,
    type: 'invalid_request_error',
    message: 'The request body declares a charset this node does not read; send JSON as UTF-8.',
    retryable: false,
  },
  ZN_ERR_API_KEY_MISSING: {
    status: 401,
    type: 'authentication_error',
    message: 'No API key was presented; send it as "Authorization: Bearer <key>" or "x-api-key".',
    retryable: false,
  },
  ZN_ERR_API_KEY_INVALID: {
    status: 401,
    type: 'authentication_error',
    message: 'The API key is not valid.',
    retryable: false,
  },
  ZN_ERR_API_KEY_MALFORMED: {
    status: 401,
    type: 'authentication_error',
    message: 'The Authorization header is malformed; send "Authorization: Bearer <key>" or "x-api-key: <key>".',
    retryable: false,
  },
  ZN_ERR_API_KEY_CONFLICT: {
    status: 401,
    type: 'authentication_error',
    message: 'The Authorization and x-api-key headers (or one of them sent twice) carry different keys; send one key.',
    retryable: false,
  },
  ZN_ERR_API_KEY_REVOKED: {
    status: 401,
    type: 'authentication_error',
    message: 'The API key has been revoked.',
    retryable: false,
  },
  ZN_ERR_API_KEY_EXPIRED: {
    status: 401,
    type: 'authentication_error',
    message: 'The API key has expired.',
    retryable: false,
  },
  ZN_ERR_ACCOUNT_SUSPENDED: {
    status: 403,
    type: 'permission_error',
    message: "The API key's account is suspended.",
    retryable: false,
  },
  ZN_ERR_MODEL_NOT_ALLOWED: {
    status: 403,
    type: 'permission_error',
    message: 'The API key may not use this model.',
    retryable: false,
    param: 'model',
  },
  ZN_ERR_MODEL_NOT_FOUND: {
    status: 404,
    type: 'invalid_request_error',
    message: 'The model does not exist on this node.',
    retryable: false,
    param: 'model',
  },
  ZN_ERR_MODEL_WRONG_API: {
    status: 400,
    type: 'invalid_request_error',
    message: 'The model is served through another API on this node.',
    retryable: false,
    param: 'model',
  },
  ZN_ERR_SURFACE_DISABLED: {
    status: 403,
    type: 'permission_error',
    message: 'This node does not serve this surface.',
    retryable: false,
  },
  ZN_ERR_TOOL_SERVER_NOT_ALLOWED: {
    status: 403,
    type: 'permission_error',
    message: 'The API key may not use this tool server.',
    retryable: false,
  },
  ZN_ERR_TOOL_SERVER_NOT_FOUND: {
    status: 404,
    type: 'invalid_request_error',
    message: 'No such tool server on this node.',
    retryable: false,
  },
  ZN_ERR_TOOL_SESSION_NOT_FOUND: {
    status: 404,
    type: 'invalid_request_error',
    message: 'No such MCP session for this API key; start a new session with initialize.',
    retryable: false,
  },
  ZN_ERR_TOOL_SESSION_CONFLICT: {
    status: 502,
    type: 'server_error',
    message: 'The tool server opened a session with an id that belongs to another API key; the node does not hand it out.',
    retryable: false,
  },
  ZN_ERR_TOOL_SESSION_UNAVAILABLE: {
    status: 503,
    type: 'server_error',
    message: 'The node could not record which API key the new MCP session belongs to, so it does not hand it out; retry initialize.',
    retryable: true,
  },
  ZN_ERR_RATE_LIMITED: {
    status: 429,
    type: 'rate_limit_error',
    message: 'A rate limit was reached; retry after the time in Retry-After.',
    retryable: true,
  },
  ZN_ERR_CONCURRENCY_LIMITED: {
    status: 429,
    type: 'rate_limit_error',
    message: 'Too many requests are running at once for this key or account.',
    retryable: true,
  },
  ZN_ERR_GUARDRAIL_BLOCKED: {
    status: 400,
    type: 'invalid_request_error',
    message: 'The content was blocked by a guardrail policy.',
    retryable: false,
  },
  ZN_ERR_GUARDRAIL_UNCHECKABLE: {
    // Fail closed on the request's shape rather than its text: the parameter is named in `param`.
    status: 400,
    type: 'invalid_request_error',
    message: "The request carries or asks for text the key's guardrail policy cannot check.",
    retryable: false,
  },
  ZN_ERR_CREDIT_EXHAUSTED: {
    status: 402,
    type: 'insufficient_quota',
    message: "The account's credit on this node cannot cover this request.",
    retryable: true,
  },
  ZN_ERR_CREDIT_WITHDRAWN: {
    // The control plane refused the node for good (deleted) or refused its last credential: what it
    // serves could never be charged, so it reserves nothing from its leases (billing/credit-withdrawal.ts).
    // A 5xx: the node's fault, not the account's; another node, or this one once re-enrolled, serves it.
    status: 503,
    type: 'server_error',
    message: "This node's credit was withdrawn because the control plane refused the node; it serves no priced requests.",
    retryable: true,
  },
  ZN_ERR_SPOOL_FULL: {
    status: 503,
    type: 'server_error',
    message: "The node's request spool is full; it accepts new requests once records are delivered.",
    retryable: true,
  },
  ZN_ERR_UPSTREAM_UNAVAILABLE: {
    status: 502,
    type: 'server_error',
    message: 'The upstream provider could not be reached.',
    retryable: true,
  },
  ZN_ERR_UPSTREAM_TIMEOUT: {
    status: 504,
    type: 'server_error',
    message: 'The upstream provider did not answer in time.',
    retryable: true,
  },
  ZN_ERR_UPSTREAM_ERROR: {
    // The default for upstream 5xx; an upstream 4xx is passed on with its own status.
    status: 502,
    type: 'server_error',
    message: 'The upstream provider answered with an error.',
    retryable: false,
  },
  ZN_ERR_NODE_NOT_READY: {
    // No verified config yet (never pushed, or the cached one was refused); the node keeps trying.
    status: 503,
    type: 'server_error',
    message: 'This node has no verified config yet and cannot serve requests.',
    retryable: true,
  },
  ZN_ERR_NODE_DELETED: {
    // The control plane refused the node NODE_DELETED over its verified link (billing/credit-withdrawal.ts):
    // its cached config and keys are the deleted node's and nothing it records is ever delivered, so it
    // serves nobody until its operator re-enrolls it (pipeline/stages/identify.ts). Not retryable here.
    status: 503,
    type: 'server_error',
    message:
      'This node was deleted from the control plane and no longer serves; send requests to another node. ' +
      "Its operator re-enrolls it with a new token: create the node again, run `zenova gateway-node reenroll-command NAME` on the control-plane host, " +
      'then on this host the printed `zenova install node … --reenroll` (or `zenova-node enroll --reenroll --token-file FILE …` for a node run without the installer).',
    retryable: false,
  },
  ZN_ERR_NODE_STOPPING: {
    // A request still running when the node's stop drain ran out (in-flight-requests.ts): its
    // answer (a 503, a stream's error event) and record. Also recorded for an open MCP GET event
    // stream the stop ended (get-stream-standing.ts), which itself ends cleanly.
    status: 503,
    type: 'server_error',
    message: 'This node is stopping.',
    retryable: true,
  },
  ZN_ERR_GUARDRAIL_POLICY_CHANGED: {
    // Only in the record of an open MCP GET event stream the node ended, cleanly, because the
    // key's output guardrails changed (get-stream-standing.ts); its client reconnects under the new ones.
    status: 503,
    type: 'server_error',
    message: "The API key's output guardrails changed; the open MCP event stream was ended so the new rules apply. Reconnect.",
    retryable: true,
  },
  ZN_ERR_INTERNAL: {
    status: 500,
    type: 'server_error',
    message: 'Internal error in the node.',
    retryable: true,
  },
} as const satisfies Record<`ZN_ERR_${string}`, ErrorSpec>;

export type ErrorCode = keyof typeof errorTable;

/**
 * The OpenAI-style error body every failed response off Anthropic's surface carries. `param` is
 * always present, null when no single parameter is at fault, as OpenAI sends it.
 */
export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: ErrorCode };
}

/** Per-instance overrides, for codes whose status depends on the situation (ZN_ERR_UPSTREAM_ERROR). */
export interface ZenovaErrorOverrides {
  status?: number;
  type?: string;
  retryable?: boolean;
  /** The offending request parameter, when the code that raises the error knows it. */
  param?: string;
  cause?: unknown;
  /** ZenovaError.logMessage, when it is not the message (one quoting an upstream's answer to the caller). */
  logMessage?: string;
}

/**
 * Both official SDKs (openai, @anthropic-ai/sdk) obey this header over their own rule, which
 * retries every 408, 409, 429 and 5xx: without it they resend requests that cannot succeed.
 */
export const SHOULD_RETRY_HEADER = 'x-should-retry';

/**
 * The x-should-retry value for an error answer: `false` when the error is not retryable, `true`
 * when it is and its status is one the SDKs retry anyway (429, 5xx; after Retry-After when the
 * answer has one). A retryable error of another status (402 ZN_ERR_CREDIT_EXHAUSTED: credit comes
 * back in seconds or days, not within an SDK's back-off) gets none, so the SDK keeps its own rule.
 */
export function shouldRetryValue(error: ZenovaError): 'true' | 'false' | undefined {
  if (!error.retryable) return 'false';
  const status = error.status;
  return status === 408 || status === 409 || status === 429 || status >= 500 ? 'true' : undefined;
}

export class ZenovaError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly type: string;
  readonly retryable: boolean;
  readonly param: string | null;
  /**
   * What the node's log says of the error: its message, but without text relayed from an upstream's
   * answer (UpstreamStatusError), which may quote the caller's request (its PII, what its guardrails
   * would mask). Only the caller's answer carries that text. An error remade from another (another
   * status, type or retry verdict) passes this on with its message.
   */
  readonly logMessage: string;

  constructor(code: ErrorCode, message?: string, overrides: ZenovaErrorOverrides = {}) {
    const spec: ErrorSpec = errorTable[code];
    super(message ?? spec.message, overrides.cause === undefined ? undefined : { cause: overrides.cause });
    this.name = 'ZenovaError';
    this.code = code;
    this.status = overrides.status ?? spec.status;
    this.type = overrides.type ?? spec.type;
    this.retryable = overrides.retryable ?? spec.retryable;
    this.param = overrides.param ?? spec.param ?? null;
    this.logMessage = overrides.logMessage ?? this.message;
  }

  toBody(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export function zenovaError(code: ErrorCode, message?: string, overrides?: ZenovaErrorOverrides): ZenovaError {
  return new ZenovaError(code, message, overrides);
}

export function isZenovaError(err: unknown): err is ZenovaError {
  return err instanceof ZenovaError;
}
