// The console's only way to the control plane: same-origin fetch with the session cookie, the CSRF
// header on every request that may change something, and the API's own error message on failure.

let csrfToken = null;
let unauthenticatedHandler = null;

/** How long one call may take, answer body included, before the console gives up on it. */
export const REQUEST_TIMEOUT_MS = 15_000;
/** The message of a call given up on: what the pages show instead of the last answer. */
export const TIMEOUT_MESSAGE = `The control plane did not answer within ${REQUEST_TIMEOUT_MS / 1000} s; `
  + 'check the connection and try again (what the page shows may be out of date).';

// The control plane's clock minus this browser's, in ms, from the last answer's Date header: ages
// ("12s ago") are measured against the server's clock, which stamped the times they count from,
// not against a browser clock that may be off by minutes.
let serverClockOffsetMs = 0;

/** An answer other than 2xx: `status`, the API's `code` (ZN_ERR_CP_…) and its message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

/** The session's CSRF token (from login or GET /api/console/session); null after logout. */
export function setCsrfToken(token) {
  csrfToken = token ?? null;
}

/** Called on any 401 except the login's own: the session ended, so app.js shows the login view. */
export function onUnauthenticated(handler) {
  unauthenticatedHandler = handler;
}

/**
 * The control plane's time now (ms since the epoch), as estimated from its last answer. The Date
 * header has whole seconds, so this is within about half a second plus half a round trip.
 */
export function serverNow() {
  return Date.now() + serverClockOffsetMs;
}

/** Learns the server's clock from an answer's Date header (sent at some moment in [sentAt, receivedAt]). */
function noteServerDate(res, sentAt, receivedAt) {
  const date = Date.parse(res.headers.get('date') ?? '');
  if (Number.isNaN(date)) return;
  // The header drops the milliseconds: the server's time was in [date, date + 1000).
  serverClockOffsetMs = Math.round(date + 500 - (sentAt + receivedAt) / 2);
}

const LOGIN_PATH = '/api/console/login';
const SESSION_PATH = '/api/console/session';
const CSRF_REFUSED = 'ZN_ERR_CP_CSRF';

/**
 * api(method, path, body?, options?): the parsed JSON answer. Throws ApiError for a non-2xx answer
 * (and for no answer at all: status 0, code 'NETWORK'; none within REQUEST_TIMEOUT_MS: status 0,
 * code 'TIMEOUT'). `options.ifMatch`: sent as the `If-Match` header (an ETag apiResponse gave), so
 * the write is refused (412 ZN_ERR_CP_PRECONDITION_FAILED) when the object changed since.
 *
 * A login in another tab replaces the session cookie all tabs share, and with it the CSRF token
 * (derived from the session id): this tab's token is then stale. On a CSRF refusal the current
 * token is fetched from GET /api/console/session and the request is sent once more, only once.
 */
export async function api(method, path, body, options) {
  return (await apiResponse(method, path, body, options)).body;
}

/**
 * As api(), answering `{ body, etag }`: the parsed JSON and the answer's `ETag` header (null when it
 * has none), for an edit to send back as `options.ifMatch`.
 */
export async function apiResponse(method, path, body, options = {}) {
  try {
    return await request(method, path, body, options);
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 403 || err.code !== CSRF_REFUSED || path === LOGIN_PATH) throw err;
    const session = await request('GET', SESSION_PATH, undefined, {});
    setCsrfToken(session.body.csrfToken);
    return request(method, path, body, options);
  }
}

async function request(method, path, body, options) {
  // A hung connection would otherwise leave the page waiting for ever, showing its last answer.
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), REQUEST_TIMEOUT_MS);
  try {
    return await send(method, path, body, options, controller.signal);
  } catch (err) {
    if (controller.signal.aborted && !(err instanceof ApiError)) throw new ApiError(0, 'TIMEOUT', TIMEOUT_MESSAGE);
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

async function send(method, path, body, options, signal) {
  const upper = method.toUpperCase();
  const headers = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (typeof options.ifMatch === 'string' && options.ifMatch !== '') headers['if-match'] = options.ifMatch;
  if (upper !== 'GET' && upper !== 'HEAD' && csrfToken !== null) headers['x-zenova-csrf'] = csrfToken;
  let res;
  const sentAt = Date.now();
  try {
    res = await fetch(path, {
      method: upper,
      credentials: 'same-origin',
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
  } catch (err) {
    if (signal.aborted) throw err;
    throw new ApiError(0, 'NETWORK', `Cannot reach the control plane (${err instanceof Error ? err.message : String(err)}); check the connection and try again.`);
  }
  noteServerDate(res, sentAt, Date.now());
  // Under the same timeout: the headers may arrive and the body never.
  const text = await res.text();
  let parsed;
  try {
    parsed = text === '' ? {} : JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (res.ok) {
    if (parsed === undefined) throw new ApiError(res.status, 'BAD_ANSWER', `The control plane answered ${path} with something that is not JSON.`);
    return { body: parsed, etag: res.headers.get('etag') };
  }
  const error = parsed && typeof parsed === 'object' ? parsed.error : undefined;
  const code = typeof error?.code === 'string' ? error.code : `HTTP_${res.status}`;
  const message = typeof error?.message === 'string' && error.message !== ''
    ? error.message
    : `The control plane answered HTTP ${res.status} ${res.statusText}.`;
  const apiError = new ApiError(res.status, code, message);
  if (res.status === 401 && path !== LOGIN_PATH && unauthenticatedHandler !== null) unauthenticatedHandler(apiError);
  throw apiError;
}
