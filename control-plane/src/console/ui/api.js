// The console's only way to the control plane: same-origin fetch with the session cookie, the CSRF
// header on every request that may change something, and the API's own error message on failure.

let csrfToken = null;
let unauthenticatedHandler = null;

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

const LOGIN_PATH = '/api/console/login';
const SESSION_PATH = '/api/console/session';
const CSRF_REFUSED = 'ZN_ERR_CP_CSRF';

/**
 * api(method, path, body?): the parsed JSON answer. Throws ApiError for a non-2xx answer (and for
 * no answer at all: status 0, code 'NETWORK').
 *
 * A login in another tab replaces the session cookie all tabs share, and with it the CSRF token
 * (derived from the session id): this tab's token is then stale. On a CSRF refusal the current
 * token is fetched from GET /api/console/session and the request is sent once more, only once.
 */
export async function api(method, path, body) {
  try {
    return await request(method, path, body);
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 403 || err.code !== CSRF_REFUSED || path === LOGIN_PATH) throw err;
    const session = await request('GET', SESSION_PATH);
    setCsrfToken(session.csrfToken);
    return request(method, path, body);
  }
}

async function request(method, path, body) {
  const upper = method.toUpperCase();
  const headers = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (upper !== 'GET' && upper !== 'HEAD' && csrfToken !== null) headers['x-zenova-csrf'] = csrfToken;
  let res;
  try {
    res = await fetch(path, {
      method: upper,
      credentials: 'same-origin',
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, 'NETWORK', `Cannot reach the control plane (${err instanceof Error ? err.message : String(err)}); check the connection and try again.`);
  }
  const text = await res.text();
  let parsed;
  try {
    parsed = text === '' ? {} : JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (res.ok) {
    if (parsed === undefined) throw new ApiError(res.status, 'BAD_ANSWER', `The control plane answered ${path} with something that is not JSON.`);
    return parsed;
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
