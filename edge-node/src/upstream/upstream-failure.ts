// Classifies why talking to an upstream failed, as the node's error codes. Messages name the
// upstream and the kind of failure only: never its URL's secrets, nor its answer's text but the
// message of an error that blames the caller's request (upstreamStatusError), bounded and redacted,
// and that to the caller only: the error's logMessage, which the node logs, leaves it out.
import { ZenovaError, zenovaError, isZenovaError } from '../errors.js';
import type { ErrorBody } from '../errors.js';
import type { AbortSwitch } from '../pipeline/abort-switch.js';
import { classifyTlsFailure } from '../tls/tls-failure.js';
import { findSecrets } from '../guardrails/detectors/secret.js';
import { secretFormsOf } from '../providers/mcp/secret-forms.js';
import { MIN_SECRET_CHARS } from '../providers/mcp/secret-prefilter.js';

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
 * Upstream statuses whose error says what was wrong with the caller's request (400, 404, 409, 413,
 * 422, …): its message, `param` and code are relayed (UpstreamStatusError). Not 401/403/407 (the
 * node's own key: NODE_SIDE_STATUSES), 402 (the node's account), 408 (the upstream's own timeout)
 * nor 429 (the node's rate limit with the upstream): those concern the node, not the request.
 */
function relaysUpstreamMessage(status: number): boolean {
  return status >= 400 && status < 500 && !NODE_SIDE_STATUSES.has(status) && status !== 402 && status !== 408 && status !== 429;
}

/**
 * An upstream that answered with an error status. 4xx pass through (the caller's request was
 * at fault) except auth failures, which are the node's problem and become 502; 5xx become 502.
 * A 429 keeps the type the SDKs treat as a rate limit (its Retry-After: upstreamRetryAfterSeconds).
 * Only identifier-like `code`/`type` values from the upstream's body are quoted, and for a status
 * that blames the request (relaysUpstreamMessage) its `message` (relayedUpstreamMessage: bounded,
 * control characters out, the node's key and credential shapes redacted), its `param` (upstreamParam)
 * and its code, as `upstream_code` beside the node's own (UpstreamStatusError). The relayed message
 * may quote the caller's request (PII its guardrails would mask), as may the param: the error's
 * logMessage, which the node logs, has the node's words and the code, neither of them. An answer saying the
 * node's account is out of quota or credit is not told apart here: a model upstream's caller asks
 * upstreamQuotaError first (upstream-call.ts); a tool server's 402 is MCP's, relayed (mcp-call.ts).
 */
export function upstreamStatusError(upstream: string, status: number, body: unknown, secret?: string | null): ZenovaError {
  const callerFault = status >= 400 && status < 500 && !NODE_SIDE_STATUSES.has(status);
  const detail = safeUpstreamErrorCode(body, secret);
  const relayed = relaysUpstreamMessage(status) ? relayedUpstreamError(body, secret) : undefined;
  const head = `Upstream "${upstream}" answered HTTP ${status}${detail ? ` (${detail})` : ''}`;
  const overrides = {
    status: callerFault ? status : 502,
    type: status === 429 ? 'rate_limit_error' : callerFault ? 'invalid_request_error' : 'server_error',
    retryable: status === 408 || status === 429 || status >= 500,
  };
  if (relayed === undefined) return zenovaError('ZN_ERR_UPSTREAM_ERROR', `${head}.`, overrides);
  // The relayed message may quote the caller's request (its PII), and so may its param (a field
  // name the caller chose: a metadata key, a tool's parameter): the caller's answer has both, the
  // node's log (logMessage, else the message, which is then the head alone) the node's own words
  // and the upstream's code only.
  return new UpstreamStatusError(
    relayed.message === undefined ? `${head}.` : `${head}: ${relayed.message}`,
    {
      ...overrides,
      ...(relayed.param === undefined ? {} : { param: relayed.param }),
      ...(relayed.message === undefined ? {} : { logMessage: `${head}; its message was relayed to the caller and is not logged.` }),
    },
    detail,
  );
}

/** The OpenAI-style body of an UpstreamStatusError: the node's own, with the upstream's code beside its `code`. */
export interface UpstreamStatusErrorBody extends ErrorBody {
  error: ErrorBody['error'] & { upstream_code?: string };
}

/**
 * ZN_ERR_UPSTREAM_ERROR for an upstream error status that blames the caller's request: its message
 * quotes the upstream's (relayedUpstreamMessage), `param` is the upstream's (upstreamParam), and the
 * body carries the upstream's own code or type as `error.upstream_code` (the node's `code` stays
 * ZN_ERR_UPSTREAM_ERROR, which apps already switch on). Its logMessage leaves the upstream's message out.
 */
export class UpstreamStatusError extends ZenovaError {
  constructor(
    message: string,
    overrides: { status: number; type: string; retryable: boolean; param?: string; logMessage?: string },
    /** The upstream's error `code` (or, without one, `type`) when it reads as one (safeUpstreamErrorCode). */
    readonly upstreamCode: string | undefined,
  ) {
    super('ZN_ERR_UPSTREAM_ERROR', message, overrides);
  }

  override toBody(): UpstreamStatusErrorBody {
    const body: UpstreamStatusErrorBody = super.toBody();
    if (this.upstreamCode !== undefined) body.error.upstream_code = this.upstreamCode;
    return body;
  }
}

/** The upstream's code an error quotes beside the node's own (UpstreamStatusError), else undefined. */
export function upstreamCodeOf(err: ZenovaError): string | undefined {
  return err instanceof UpstreamStatusError ? err.upstreamCode : undefined;
}

/** The most characters of an upstream's error message relayed; a longer one is cut, marked with `…`. */
export const MAX_RELAYED_UPSTREAM_MESSAGE_CHARS = 1000;
/** The most characters of an upstream's message read at all (the rest could never be relayed). */
const MAX_READ_UPSTREAM_MESSAGE_CHARS = 4 * MAX_RELAYED_UPSTREAM_MESSAGE_CHARS;
/** What stands where the node's key or a credential shape was in a relayed message. */
const REDACTED = '[redacted]';
/** An upstream's `param` relayed: a request field's path as OpenAI writes it (`messages`, `messages[0].content`, `tools.0.function.name`). */
const UPSTREAM_PARAM = /^[A-Za-z_][A-Za-z0-9_.[\]-]{0,99}$/;
/**
 * Control characters (C0, DEL, C1), line and paragraph separators and bidirectional formatting
 * characters: written as a space, so that a relayed message is one line that reads as it shows.
 */
// eslint-disable-next-line no-control-regex
const CONTROL_CHARS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]+/g;

/**
 * The upstream error's message and param to relay (each when it passes its checks), from an
 * `{"error":{"message":…,"param":…}}` body (OpenAI's and Anthropic's shape); undefined for any other
 * body, which keeps the generic message.
 */
function relayedUpstreamError(body: unknown, secret: string | null | undefined): { message?: string; param?: string } | undefined {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return undefined;
  const error = (body as { error?: unknown }).error;
  if (typeof error !== 'object' || error === null || Array.isArray(error)) return undefined;
  const fields = error as Record<string, unknown>;
  const message = typeof fields.message === 'string' ? relayedUpstreamMessage(fields.message, secret) : undefined;
  const param = typeof fields.param === 'string' ? upstreamParam(fields.param, secret) : undefined;
  return { ...(message === undefined ? {} : { message }), ...(param === undefined ? {} : { param }) };
}

/**
 * An upstream's error message as the node relays it: control characters written as spaces and
 * runs of space as one, the node's key for the upstream (in any JSON or HTML escaped form, and any
 * piece of half of it or more) and the credential shapes the guardrails' secret detector knows
 * replaced by `[redacted]`, then cut to MAX_RELAYED_UPSTREAM_MESSAGE_CHARS. undefined when nothing
 * is left, or when the key is too short to be searched for (under MIN_SECRET_CHARS) and appears in it.
 */
export function relayedUpstreamMessage(raw: string, secret: string | null | undefined): string | undefined {
  let text = cutAt(raw, MAX_READ_UPSTREAM_MESSAGE_CHARS).replace(CONTROL_CHARS, ' ');
  if (secret !== undefined && secret !== null && secret.length > 0) {
    const redacted = withoutKey(text, secret);
    if (redacted === undefined) return undefined;
    text = redacted;
  }
  const shapes = findSecrets(text);
  for (let i = shapes.length - 1; i >= 0; i -= 1) text = text.slice(0, shapes[i]!.start) + REDACTED + text.slice(shapes[i]!.end);
  text = text.replace(/\s+/g, ' ').trim();
  if (text.length === 0) return undefined;
  return text.length > MAX_RELAYED_UPSTREAM_MESSAGE_CHARS ? `${cutAt(text, MAX_RELAYED_UPSTREAM_MESSAGE_CHARS - 1)}…` : text;
}

/** `text` cut to at most `max` UTF-16 units, never inside a surrogate pair. */
function cutAt(text: string, max: number): string {
  if (text.length <= max) return text;
  const code = text.charCodeAt(max - 1);
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max);
}

/**
 * `text` with the node's key for the upstream replaced: in every form an encoder writes it
 * (secretFormsOf, as a tool server's answers are redacted: mcp-call.ts withoutSecret) and any piece
 * of it of half the key or more (at least MIN_SECRET_CHARS), as written. undefined (not relayed at
 * all) when the key is shorter than MIN_SECRET_CHARS (searching for it would garble the text) and
 * appears in `text`, or when such a piece is still there once `\uXXXX`, `\xXX` and HTML character
 * escapes are read (the key escaped letter by letter).
 */
function withoutKey(text: string, secret: string): string | undefined {
  if (secret.length < MIN_SECRET_CHARS) return text.includes(secret) ? undefined : text;
  // One character per byte, as the pattern is built: the key's UTF-8 and each escape match as bytes.
  const latin1 = Buffer.from(text, 'utf8').toString('latin1');
  const formsOut = latin1.replace(secretFormsOf(secret), REDACTED);
  let out = formsOut === latin1 ? text : Buffer.from(formsOut, 'latin1').toString('utf8');
  const piece = Math.min(secret.length, Math.max(MIN_SECRET_CHARS, Math.floor(secret.length / 2)));
  const ranges = keyPieceRanges(out, secret, piece);
  for (let i = ranges.length - 1; i >= 0; i -= 1) out = out.slice(0, ranges[i]![0]) + REDACTED + out.slice(ranges[i]![1]);
  const decoded = out
    .replace(/\\+u([0-9A-Fa-f]{4})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)))
    .replace(/\\+x([0-9A-Fa-f]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)))
    .replace(/&#[xX]([0-9A-Fa-f]{1,6});/g, (_, hex: string) => String.fromCodePoint(Math.min(parseInt(hex, 16), 0x10ffff)))
    .replace(/&#([0-9]{1,7});/g, (_, dec: string) => String.fromCodePoint(Math.min(Number(dec), 0x10ffff)));
  if (decoded !== out && keyPieceRanges(decoded, secret, piece).length > 0) return undefined;
  return out;
}

/** Where `text` holds pieces of `secret` of `piece` characters or more, as merged [from, to) ranges. */
function keyPieceRanges(text: string, secret: string, piece: number): Array<[number, number]> {
  const ranges: Array<[number, number]> = [];
  for (let at = 0; at + piece <= text.length; at += 1) {
    // Its first MIN_SECRET_CHARS characters rule most places out at a fraction of a long key's cost.
    if (!secret.includes(text.slice(at, at + MIN_SECRET_CHARS)) || !secret.includes(text.slice(at, at + piece))) continue;
    const last = ranges.at(-1);
    if (last !== undefined && at <= last[1]) last[1] = at + piece;
    else ranges.push([at, at + piece]);
  }
  return ranges;
}

/**
 * The upstream error's `param` when it reads as a request field's path (UPSTREAM_PARAM) and could be
 * no credential (readsAsErrorCode's checks: the node's key in part, a credential shape); else undefined.
 */
function upstreamParam(value: string, secret: string | null | undefined): string | undefined {
  if (!UPSTREAM_PARAM.test(value)) return undefined;
  if (value.split(/[_.[\]-]/).some(looksRandom) || findSecrets(value).length > 0 || holdsKeyPiece(value, secret)) return undefined;
  return value;
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
  return !holdsKeyPiece(value, secret);
}

/** Whether `value` holds the node's key for the upstream, or a piece of half of it or more (at least 4 characters). */
function holdsKeyPiece(value: string, secret: string | null | undefined): boolean {
  if (secret === undefined || secret === null || secret.length === 0) return false;
  const piece = Math.min(secret.length, Math.max(4, Math.floor(secret.length / 2)));
  for (let at = 0; at + piece <= secret.length; at += 1) if (value.includes(secret.slice(at, at + piece))) return true;
  return false;
}
