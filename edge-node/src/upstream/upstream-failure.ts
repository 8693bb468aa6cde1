// Classifies why talking to an upstream failed, as the node's error codes. Messages name the
// upstream and the kind of failure only: never its URL's secrets or its answer's text.
import { ZenovaError, zenovaError, isZenovaError } from '../errors.js';
import type { AbortSwitch } from '../pipeline/abort-switch.js';
import { classifyTlsFailure } from '../tls/tls-failure.js';
import { findSecrets } from '../guardrails/detectors/secret.js';

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT']);

// Connection-level failures: nothing (or not all) came back, another attempt may work.
const UNAVAILABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENETDOWN',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_DESTROYED',
  'UND_ERR_RES_CONTENT_LENGTH_MISMATCH',
  'UND_ERR_INFO',
]);

/** What a TLS handshake failure says to the caller: the kind of problem, never the upstream's address. */
const TLS_PROBLEMS: Readonly<Partial<Record<ReturnType<typeof classifyTlsFailure>, string>>> = {
  untrusted: 'its TLS certificate is not trusted by this node',
  expired: 'its TLS certificate has expired or is not yet valid',
  'name-mismatch': 'its TLS certificate does not name the host of its base URL',
  'not-tls': 'it did not answer in TLS (an https:// base URL on a plain HTTP port?)',
};

// OpenSSL's other verdicts on a certificate (Node sets them as the error's code) that
// classifyTlsFailure has no kind for: a CA certificate served as a leaf, a revoked one, ...
const CERTIFICATE_REFUSED_CODES = new Set([
  'INVALID_PURPOSE',
  'INVALID_CA',
  'CERT_REVOKED',
  'CERT_CHAIN_TOO_LONG',
  'PATH_LENGTH_EXCEEDED',
  'HOSTNAME_MISMATCH',
  'UNABLE_TO_DECRYPT_CERT_SIGNATURE',
  'UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY',
  'ERROR_IN_CERT_NOT_BEFORE_FIELD',
  'ERROR_IN_CERT_NOT_AFTER_FIELD',
  'UNABLE_TO_GET_CRL',
]);

// undici's codes for a request the node itself got wrong: a bug, not the network.
const NODE_SIDE_UNDICI_CODES = new Set([
  'UND_ERR_INVALID_ARG',
  'UND_ERR_INVALID_RETURN_VALUE',
  'UND_ERR_NOT_SUPPORTED',
  'UND_ERR_REQ_CONTENT_LENGTH_MISMATCH',
  'UND_ERR_BPL_MISSING_UPSTREAM',
]);

/**
 * A code the network or the upstream's bytes gave: errno (ECONNABORTED), undici's, OpenSSL's, the
 * HTTP parser's. Node's own ERR_INVALID_ARG_TYPE and the like are bugs and stay internal.
 */
function isNetworkCode(code: string): boolean {
  if (NODE_SIDE_UNDICI_CODES.has(code)) return false;
  return /^E[A-Z0-9]+$/.test(code) || /^(UND_ERR_|ERR_SSL_|ERR_TLS_|HPE_)/.test(code);
}

/** The network's code for a failure (errno, undici's, OpenSSL's), looking through causes; undefined when none. */
export function upstreamFailureCode(err: unknown): string | undefined {
  return errorCode(err);
}

function errorCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string') return code;
  // Happy-eyeballs connects report an AggregateError whose parts carry the code.
  const errors = (err as { errors?: unknown }).errors;
  if (Array.isArray(errors)) {
    for (const inner of errors) {
      const innerCode = errorCode(inner);
      if (innerCode !== undefined) return innerCode;
    }
  }
  return errorCode((err as { cause?: unknown }).cause);
}

/**
 * classifyUpstreamFailure for a break while a 2xx stream was read (before its first event or
 * after): the upstream was reached and answered, so a failure at the connection says it broke off
 * its stream (an operator then looks at the upstream, not at DNS, TLS or a firewall). Its code and
 * whether it may be retried stay the same.
 */
export function streamBreakFailure(err: unknown, upstream: string): ZenovaError {
  const failure = classifyUpstreamFailure(err, upstream);
  if (failure.code !== 'ZN_ERR_UPSTREAM_UNAVAILABLE' || isZenovaError(err)) return failure;
  const code = errorCode(err);
  return zenovaError('ZN_ERR_UPSTREAM_UNAVAILABLE', `Upstream "${upstream}" answered, then broke off its stream${code === undefined ? '' : ` (${code})`}.`, { cause: err });
}

/** True when the failure is our own abort (the caller went away), which needs no answer. */
export function isAbort(err: unknown, signal?: AbortSwitch): boolean {
  if (signal?.aborted) return true;
  const name = (err as { name?: unknown } | null)?.name;
  return name === 'AbortError' || errorCode(err) === 'UND_ERR_ABORTED';
}

export function classifyUpstreamFailure(err: unknown, upstream: string): ZenovaError {
  if (isZenovaError(err)) return err;
  const code = errorCode(err);
  if (code !== undefined && TIMEOUT_CODES.has(code)) {
    return zenovaError('ZN_ERR_UPSTREAM_TIMEOUT', `Upstream "${upstream}" did not answer in time (${code}).`, { cause: err });
  }
  if (code !== undefined && (UNAVAILABLE_CODES.has(code) || code.startsWith('HPE_'))) {
    return zenovaError('ZN_ERR_UPSTREAM_UNAVAILABLE', `Upstream "${upstream}" could not be reached (${code}).`, { cause: err });
  }
  // A failed handshake is the upstream's (or its base URL's) fault: another target may answer.
  const tlsProblem = TLS_PROBLEMS[classifyTlsFailure(err)];
  if (tlsProblem !== undefined) {
    return zenovaError('ZN_ERR_UPSTREAM_UNAVAILABLE', `Upstream "${upstream}" could not be reached: ${tlsProblem}${code !== undefined ? ` (${code})` : ''}.`, { cause: err });
  }
  if (code !== undefined && CERTIFICATE_REFUSED_CODES.has(code)) {
    return zenovaError('ZN_ERR_UPSTREAM_UNAVAILABLE', `Upstream "${upstream}" could not be reached: its TLS certificate was refused (${code}).`, { cause: err });
  }
  if (code !== undefined && isNetworkCode(code)) {
    return zenovaError('ZN_ERR_UPSTREAM_UNAVAILABLE', `Upstream "${upstream}" failed at the connection (${code}).`, { cause: err });
  }
  return zenovaError('ZN_ERR_INTERNAL', undefined, { cause: err });
}

/** Upstream statuses that say the node's own upstream credentials are wrong, not the caller's. */
const NODE_SIDE_STATUSES = new Set([401, 403, 407]);

/** Whether an upstream status says the node's credentials for that upstream are refused (401, 403, 407). */
export function isNodeCredentialStatus(status: number): boolean {
  return NODE_SIDE_STATUSES.has(status);
}

/**
 * An upstream that answered with an error status. 4xx pass through (the caller's request was
 * at fault) except auth failures, which are the node's problem and become 502; 5xx become 502.
 * A 429 keeps the type the SDKs treat as a rate limit (its Retry-After: upstreamRetryAfterSeconds).
 * Only identifier-like `code`/`type` values from the upstream's body are quoted. An answer saying the
 * node's account is out of quota or credit is not told apart here: a model upstream's caller asks
 * upstreamQuotaError first (upstream-call.ts); a tool server's 402 is MCP's, relayed (mcp-call.ts).
 */
export function upstreamStatusError(upstream: string, status: number, body: unknown, secret?: string | null): ZenovaError {
  const callerFault = status >= 400 && status < 500 && !NODE_SIDE_STATUSES.has(status);
  const detail = safeUpstreamErrorCode(body, secret);
  const message = `Upstream "${upstream}" answered HTTP ${status}${detail ? ` (${detail})` : ''}.`;
  return zenovaError('ZN_ERR_UPSTREAM_ERROR', message, {
    status: callerFault ? status : 502,
    type: status === 429 ? 'rate_limit_error' : callerFault ? 'invalid_request_error' : 'server_error',
    retryable: status === 408 || status === 429 || status >= 500,
  });
}

/**
 * The node's answer when a model upstream's error status says the node's account with it is out of
 * quota or credit (isQuotaExhaustion): an UpstreamQuotaError. undefined for any other answer, which
 * is upstreamStatusError's.
 */
export function upstreamQuotaError(upstream: string, status: number, body: unknown, secret?: string | null): UpstreamQuotaError | undefined {
  if (!isQuotaExhaustion(status, body)) return undefined;
  const detail = safeUpstreamErrorCode(body, secret);
  return new UpstreamQuotaError(upstream, `answered HTTP ${status}${detail ? ` (${detail})` : ''}`);
}

/**
 * Whether an upstream's error says the node's account with it is out of quota or credit: any 402
 * (OpenRouter's "insufficient credits", Anthropic's billing_error), an `insufficient_quota` type or
 * code (OpenAI's, under a 429 that is no rate limit), a `billing_error` type, or Anthropic's 400
 * "credit balance is too low". Its message is only matched, never quoted.
 */
function isQuotaExhaustion(status: number | undefined, body: unknown): boolean {
  if (status === 402) return true;
  const error = typeof body === 'object' && body !== null ? (body as { error?: unknown }).error : undefined;
  if (typeof error !== 'object' || error === null) return false;
  const { type, code, message } = error as Record<string, unknown>;
  if ([type, code].some((value) => value === 'insufficient_quota' || value === 'billing_error')) return true;
  return status === 400 && typeof message === 'string' && message.length <= 1000 && /credit balance is too low/i.test(message);
}

/**
 * The node's answer for an upstream account out of quota or credit: a non-retryable 502 saying so,
 * as the operator's to fix (no caller retry helps). An attempt failing with it is quotaExhausted
 * (forward-plan.ts quotaExhaustedAttempt): tried on the next target only, a failure for target health.
 */
export class UpstreamQuotaError extends ZenovaError {
  constructor(upstream: string, what: string) {
    super(
      'ZN_ERR_UPSTREAM_ERROR',
      `Upstream "${upstream}" ${what}: the node's account with this upstream is out of quota or credit. The node's operator must top it up; retrying will not help.`,
      { status: 502, type: 'server_error', retryable: false },
    );
  }
}

/**
 * ZN_ERR_UPSTREAM_ERROR for an answer in a Content-Encoding other than identity, undefined for an
 * uncompressed one (no coding but `identity` or empty list items). The node asks upstreams and tool
 * servers for `identity` and decompresses nothing: what it parses, redacts and checks is the body
 * as sent. The coding is quoted bounded, characters outside a token's replaced. `retryable` for a
 * model's answer (nothing reached the caller; another target may answer), not a tool call's (the tool ran).
 */
export function unaskedEncodingError(upstream: string, encoding: string | string[] | undefined, retryable = false): ZenovaError | undefined {
  if (encoding === undefined) return undefined;
  const codings = String(encoding).split(',').map((coding) => coding.trim().toLowerCase());
  if (codings.every((coding) => coding === '' || coding === 'identity')) return undefined;
  const name = String(encoding).slice(0, 40).replace(/[^A-Za-z0-9 ,._-]/g, '?');
  return zenovaError('ZN_ERR_UPSTREAM_ERROR', `Upstream "${upstream}" answered with Content-Encoding "${name}" although the node asked for identity.`, { retryable });
}

/** The longest wait passed on from an upstream's Retry-After; a longer one is likely a mistake. */
export const MAX_UPSTREAM_RETRY_AFTER_SECONDS = 3600;
/** The wait a 429 is passed on with when the upstream gave none (or none that parses). */
export const DEFAULT_UPSTREAM_RETRY_AFTER_SECONDS = 1;

/**
 * The Retry-After (whole seconds, 1 to MAX_UPSTREAM_RETRY_AFTER_SECONDS) for an upstream's 429:
 * its own header when it is delta-seconds or an HTTP date, else the default.
 */
export function upstreamRetryAfterSeconds(header: string | string[] | undefined, nowMs: number = Date.now()): number {
  const value = (Array.isArray(header) ? header[0] : header)?.trim();
  let seconds: number | undefined;
  if (value !== undefined && /^[0-9]{1,10}(\.[0-9]+)?$/.test(value)) seconds = Math.ceil(Number(value));
  else if (value !== undefined && value.length <= 64) {
    const at = Date.parse(value);
    if (Number.isFinite(at)) seconds = Math.ceil((at - nowMs) / 1000);
  }
  if (seconds === undefined || !Number.isFinite(seconds)) return DEFAULT_UPSTREAM_RETRY_AFTER_SECONDS;
  return Math.min(MAX_UPSTREAM_RETRY_AFTER_SECONDS, Math.max(1, seconds));
}

/**
 * The HTTP status each error `type` Anthropic sends stands for (docs.anthropic.com, Errors), for an
 * error reported inside a stream, which has no status of its own.
 */
const ERROR_TYPE_STATUS: Readonly<Record<string, number>> = {
  invalid_request_error: 400,
  authentication_error: 401,
  billing_error: 402,
  permission_error: 403,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  timeout_error: 504,
  overloaded_error: 529,
};

/**
 * An error the upstream reported in band (inside a stream, or as a 2xx answer's whole body), carrying
 * what its body said beyond the node's code and retry verdict.
 */
export class UpstreamInBandError extends ZenovaError {
  constructor(
    message: string,
    retryable: boolean,
    /** It reported a rate limit (a 429, a rate_limit type or code): isUpstreamStreamRateLimit. */
    readonly rateLimit: boolean,
    /** The status the upstream's error `type` stands for, but for the node's own key's: upstreamErrorTypeStatus. */
    readonly typeStatus: number | undefined,
    /**
     * The node's answer when it said the node's upstream account is out of quota or credit: for the
     * attempt that read it before anything reached the caller (upstream-call.ts inBandFailure,
     * forwardPlan), not for an error event mid-stream, which keeps this error.
     */
    readonly quotaExhaustion: UpstreamQuotaError | undefined,
  ) {
    super('ZN_ERR_UPSTREAM_ERROR', message, { retryable });
  }
}

/**
 * An error the upstream reported inside an answer it had started (an SSE `event: error`, or a chunk
 * carrying an `error`, an object or a string): ZN_ERR_UPSTREAM_ERROR quoting only an identifier-like
 * code or type of an object, never its message. Another attempt may help unless the upstream blamed
 * the request itself or the node's key: a 4xx other than 408 and 429 as the error's numeric `code`
 * or `status`, or as its `type` stands for (ERROR_TYPE_STATUS), as an upstream's HTTP status would be
 * (upstreamStatusError). One that says the node's upstream account is out of quota or credit carries
 * the node's answer for it (UpstreamInBandError.quotaExhaustion). `secret`: the node's key for that
 * upstream, which a code or type is not quoted with (safeUpstreamErrorCode), as on an error status.
 */
export function upstreamStreamError(upstream: string, body: unknown, secret?: string | null): UpstreamInBandError {
  return inBandError(upstream, body, 'ended the stream with an error', secret);
}

/**
 * An error object an upstream sent as its whole JSON answer under a 2xx (`{"error":{…}}`, an
 * Anthropic `{"type":"error","error":{…}}`): classified as one inside a stream (upstreamStreamError),
 * `secret` too.
 */
export function upstreamAnswerError(upstream: string, body: unknown, secret?: string | null): UpstreamInBandError {
  return inBandError(upstream, body, 'answered HTTP 2xx with an error object', secret);
}

function inBandError(upstream: string, body: unknown, what: string, secret: string | null | undefined): UpstreamInBandError {
  // The quota answer below quotes this same detail, so it never names the key either.
  const detail = safeUpstreamErrorCode(body, secret);
  const error = typeof body === 'object' && body !== null ? (body as { error?: unknown }).error : undefined;
  const fields = typeof error === 'object' && error !== null ? (error as Record<string, unknown>) : {};
  const typeStatus = typeof fields.type === 'string' && Object.hasOwn(ERROR_TYPE_STATUS, fields.type) ? ERROR_TYPE_STATUS[fields.type] : undefined;
  const status = typeof fields.code === 'number' ? fields.code : typeof fields.status === 'number' ? fields.status : typeStatus;
  const callerFault = fields.type === 'invalid_request_error' || (status !== undefined && status >= 400 && status < 500 && status !== 408 && status !== 429);
  const rateLimit = status === 429 || [fields.type, fields.code].some((v) => typeof v === 'string' && RATE_LIMIT_NAME.test(v));
  return new UpstreamInBandError(
    `Upstream "${upstream}" ${what}${detail ? ` (${detail})` : ''}.`,
    !callerFault,
    rateLimit,
    // Not the node's own credential trouble (authentication_error, permission_error): to the caller
    // that reads as its own key refused; it stays the node's api_error, as an HTTP 401/403 becomes 502.
    typeStatus !== undefined && !NODE_SIDE_STATUSES.has(typeStatus) ? typeStatus : undefined,
    isQuotaExhaustion(status, body) ? new UpstreamQuotaError(upstream, `${what}${detail ? ` (${detail})` : ''}`) : undefined,
  );
}

/**
 * The HTTP status the upstream's own error `type` stands for (ERROR_TYPE_STATUS: overloaded_error
 * 529, invalid_request_error 400, …) when `err` is an error it reported in band: a stream's error
 * event then keeps that type for the caller (an SDK may act on overloaded_error), not the
 * node's 502 api_error.
 */
export function upstreamErrorTypeStatus(err: ZenovaError): number | undefined {
  return err instanceof UpstreamInBandError ? err.typeStatus : undefined;
}

/**
 * The node's answer for `err` when it is an error the upstream reported in band saying the node's
 * account with it is out of quota or credit (UpstreamInBandError.quotaExhaustion); else undefined.
 */
export function inBandQuotaExhaustion(err: ZenovaError): UpstreamQuotaError | undefined {
  return err instanceof UpstreamInBandError ? err.quotaExhaustion : undefined;
}

/** Error types and codes providers use for a rate limit inside a stream (rate_limit_exceeded, rate_limit_error). */
const RATE_LIMIT_NAME = /rate_?limit/i;

/**
 * Whether `err` is an upstream's rate limit reported inside a stream: retryable (a fallback may
 * answer) but, like an HTTP 429, no sign that the target is unhealthy (routing/target-health.ts).
 */
export function isUpstreamStreamRateLimit(err: ZenovaError): boolean {
  return err instanceof UpstreamInBandError && err.rateLimit;
}

/**
 * The upstream's error `code` or `type`, when it reads as one (`invalid_api_key`,
 * `overloaded_error`, `DeploymentNotFound`, `1001`), to quote in the caller's error and the log.
 * The upstream chooses it, so a value that could be a credential is not quoted: the node's own key
 * for it (`secret`, in any part of half its length or more), a credential shape the guardrails'
 * secret detector knows, more than 4 digits beside letters, or a run of 12 or more characters
 * switching case as random text does (a token; CamelCase names pass).
 */
function safeUpstreamErrorCode(body: unknown, secret: string | null | undefined): string | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const error = (body as { error?: unknown }).error;
  if (typeof error !== 'object' || error === null) return undefined;
  for (const key of ['code', 'type'] as const) {
    const value = (error as Record<string, unknown>)[key];
    if (typeof value === 'string' && readsAsErrorCode(value, secret)) return value;
  }
  return undefined;
}

/** A part of 12 or more characters switching from small to capital letters as often as random text does (CamelCase words do not). */
function looksRandom(part: string): boolean {
  if (part.length < 12) return false;
  const switches = part.match(/[a-z](?=[A-Z])/g)?.length ?? 0;
  return switches / part.length > 0.2;
}

function readsAsErrorCode(value: string, secret: string | null | undefined): boolean {
  if (/^\d{1,6}$/.test(value)) return true;
  if (!/^[A-Za-z][A-Za-z0-9_.-]{0,47}$/.test(value)) return false;
  if ((value.match(/\d/g)?.length ?? 0) > 4) return false;
  if (value.split(/[_.-]/).some(looksRandom)) return false;
  if (findSecrets(value).length > 0) return false;
  if (secret !== undefined && secret !== null && secret.length > 0) {
    const piece = Math.min(secret.length, Math.max(4, Math.floor(secret.length / 2)));
    for (let at = 0; at + piece <= secret.length; at += 1) if (value.includes(secret.slice(at, at + piece))) return false;
  }
  return true;
}
