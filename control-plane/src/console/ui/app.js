// The console's entry: the login view, the shell (nav, logout) and the hash router that loads one
// page module at a time from ./pages/. Pages get `render(root, params, ctx)` and may return a
// cleanup function, called when the page is left or the session ends (docs/console.md).
import { api, onUnauthenticated, setCsrfToken } from './api.js';
import { clear, h } from './dom.js';

const PRODUCT = 'Zenova Gateway';
const DEFAULT_HASH = '#/nodes';
// Waits between the tries of GET /api/console/session while the control plane cannot be reached at
// load: doubling from 1 s, then every 30 s (the bound) until it answers.
const REACH_RETRY_FIRST_MS = 1_000;
const REACH_RETRY_MAX_MS = 30_000;
const SESSION_ENDED = 'Your console session has ended (it expired or was logged out); log in again with the admin token to go on where you were.';

const ROUTES = [
  { pattern: /^\/nodes$/, module: 'nodes-list.js', nav: 'nodes', title: 'Nodes', params: () => ({}) },
  // Not under /nodes/: `new` is a valid node name, and `add-node` has no place in /nodes/<name>.
  { pattern: /^\/add-node$/, module: 'add-node.js', nav: 'nodes', title: 'Add node', params: () => ({}) },
  { pattern: /^\/nodes\/([^/]+)$/, module: 'node-detail.js', nav: 'nodes', title: 'Node', params: (m) => ({ name: decodeURIComponent(m[1]) }) },
  // The list's filters and page are in the hash's query (#/requests?status=failed&cursor=…): params.query.
  { pattern: /^\/requests$/, module: 'requests.js', nav: 'requests', title: 'Requests', params: (m, query) => ({ query }) },
  { pattern: /^\/requests\/([^/]+)$/, module: 'requests.js', nav: 'requests', title: 'Requests', params: (m) => ({ requestId: decodeURIComponent(m[1]) }) },
];

const app = document.getElementById('app');
/** 'none' while booting, 'unreachable' (the session could not be asked for), 'login' or 'shell'. */
let view = 'none';
let pageMain = null;
let pageCleanup = null;
// Bumped on every navigation: a page module that finishes loading after the user moved on is not shown.
let routeSeq = 0;
// The hash the session ended on (null: none, or the user logged out): the first page shown after
// logging in again gets ctx.resumed when it is that same route, so it may take back what it kept.
let resumeHash = null;
// The control plane's ZENOVA_PUBLIC_URL (null: unset), from the login or session answer: pages get
// it as ctx.publicUrl (the Add Node wizard's default control-plane URL behind a reverse proxy).
let publicUrl = null;
// The shell's notices (above the page), and those not dismissed yet (`{ element, onDismiss }`):
// kept across pages, and across a session that ended under the shell (shown again after the login,
// so a one-time install command in one is not lost with the session); a logout drops them.
let noticeArea = null;
let notices = [];
// While Log out is waiting for its answer, a 401 (its own, or another call's) is no session ended
// under the shell: the user is leaving, so nothing is kept for a later login (logout() shows the
// plain login view once it is over).
let loggingOut = false;
// The next try of the session while 'unreachable' (a timer), and the tries made so far.
let reachTimer;
let reachTries = 0;

/**
 * The matching route and its params for a location hash, or undefined. A `?` starts the route's
 * query (URLSearchParams; names and ids in the path are %-encoded, so a `?` there is `%3F`).
 */
function matchRoute(hash) {
  const whole = hash.startsWith('#') ? hash.slice(1) : hash;
  const at = whole.indexOf('?');
  const path = at === -1 ? whole : whole.slice(0, at);
  for (const route of ROUTES) {
    const m = route.pattern.exec(path);
    if (!m) continue;
    try {
      return { route, params: route.params(m, new URLSearchParams(at === -1 ? '' : whole.slice(at + 1))) };
    } catch {
      return undefined; // a malformed %-escape: not a name any page can show
    }
  }
  return undefined;
}

function errorBanner(message) {
  return h('div', { class: 'banner banner-error', role: 'alert', 'data-testid': 'error' }, message);
}

/** `reason.sessionEnded`: the page is left for the login view, not for another page. */
function runPageCleanup(reason = { sessionEnded: false }) {
  const cleanup = pageCleanup;
  pageCleanup = null;
  if (typeof cleanup === 'function') {
    try {
      cleanup(reason);
    } catch (err) {
      console.warn('page cleanup failed', err);
    }
  }
}

/**
 * notify({ content, testid?, onDismiss? }): a notice on whatever page is shown, for what finished
 * after its page was left; it stays, across pages, until dismissed (then onDismiss runs). False
 * when there is no one to show it to (logged out).
 */
function notify({ content, testid, onDismiss }) {
  if (view !== 'shell' && resumeHash === null) return false;
  const notice = { element: null, onDismiss };
  const dismiss = h('button', {
    type: 'button', class: 'btn btn-small',
    onclick: () => {
      notice.element.remove();
      notices = notices.filter((n) => n !== notice);
      onDismiss?.();
    },
  }, 'Dismiss');
  notice.element = h('section', { class: 'banner banner-info notice', role: 'region', 'aria-label': 'Notice', 'data-testid': testid ?? 'notice' },
    content, h('div', { class: 'toolbar' }, dismiss));
  notices.push(notice);
  noticeArea?.append(notice.element);
  return true;
}

function dropNotices() {
  for (const notice of notices) notice.onDismiss?.();
  notices = [];
}

function navigate(hash) {
  if (location.hash === hash) void route();
  else location.hash = hash;
}

async function route() {
  if (view !== 'shell' || pageMain === null) return;
  const seq = ++routeSeq;
  runPageCleanup();
  let found = matchRoute(location.hash);
  if (!found) {
    // Unknown or empty hash: the nodes list, without an extra history entry.
    history.replaceState(null, '', DEFAULT_HASH);
    found = matchRoute(DEFAULT_HASH);
  }
  const { route: current, params } = found;
  // Only the first route after the login: a later visit to the same page starts afresh.
  const resumed = resumeHash !== null && resumeHash === location.hash;
  resumeHash = null;
  for (const link of app.querySelectorAll('[data-nav]')) {
    if (link.dataset.nav === current.nav) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  document.title = `${current.title} · ${PRODUCT}`;
  const root = h('div', { class: 'page-root' });
  clear(pageMain);
  pageMain.appendChild(root);
  let mod;
  try {
    mod = await import(`./pages/${current.module}`);
  } catch (err) {
    if (seq !== routeSeq) return;
    root.appendChild(errorBanner(`This page could not be loaded (${err instanceof Error ? err.message : String(err)}); reload the console.`));
    return;
  }
  if (seq !== routeSeq || view !== 'shell') return;
  try {
    const cleanup = mod.render(root, params, { api, navigate, h, clear, resumed, publicUrl, notify });
    pageCleanup = typeof cleanup === 'function' ? cleanup : null;
  } catch (err) {
    console.error(err);
    root.appendChild(errorBanner(`This page failed to show: ${err instanceof Error ? err.message : String(err)}`));
  }
}

/** `sessionEnded`: the session ended under the shell (a 401), rather than a logout or no session at boot. */
function showLogin(message, { sessionEnded = false } = {}) {
  stopReaching();
  // Read before the cleanup: the hash is where the user was, and where the next login returns.
  resumeHash = sessionEnded ? location.hash : null;
  runPageCleanup({ sessionEnded });
  routeSeq += 1;
  view = 'login';
  pageMain = null;
  noticeArea = null;
  if (!sessionEnded) dropNotices();
  setCsrfToken(null);
  document.title = `Log in · ${PRODUCT}`;
  const input = h('input', {
    id: 'admin-token', name: 'adminToken', type: 'password', required: true, autocomplete: 'off', spellcheck: 'false',
    'aria-describedby': 'admin-token-help',
  });
  const button = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Log in');
  const errorSlot = h('div', { class: 'login-error' }, message ? errorBanner(message) : null);
  const onsubmit = async (event) => {
    event.preventDefault();
    clear(errorSlot);
    button.disabled = true;
    try {
      // Pasted tokens often carry a space or line break; a token is visible ASCII only, so one never
      // starts or ends with whitespace, and the untrimmed value would only count as a failed login.
      const session = await api('POST', '/api/console/login', { adminToken: input.value.trim() });
      input.value = '';
      setCsrfToken(session.csrfToken);
      publicUrl = session.publicUrl ?? null;
      showShell();
    } catch (err) {
      errorSlot.appendChild(errorBanner(err instanceof Error ? err.message : String(err)));
      button.disabled = false;
      input.focus();
      input.select();
    }
  };
  clear(app);
  app.appendChild(h('main', { class: 'login' },
    h('form', { class: 'login-card', 'aria-labelledby': 'login-title', onsubmit },
      h('h1', { id: 'login-title' }, PRODUCT),
      h('p', { class: 'muted' }, 'Console of the control plane.'),
      errorSlot,
      h('label', { for: 'admin-token' }, 'Admin token'),
      input,
      h('p', { id: 'admin-token-help', class: 'hint' },
        'The control plane\'s ZENOVA_ADMIN_TOKEN (the dev stack prints it and keeps it in .zenova/dev.env). ',
        'It is sent once; the console then holds a 12-hour session.'),
      button)));
  input.focus();
}

async function logout(button) {
  button.disabled = true;
  loggingOut = true;
  try {
    await api('POST', '/api/console/logout');
  } catch (err) {
    // A 401: the session had already ended (expired, or logged out in another tab), so this is a
    // logout all the same, not a session to come back to; anything else leaves the user logged in.
    if (err?.status !== 401) {
      button.disabled = false;
      pageMain?.prepend(errorBanner(`Logging out failed: ${err instanceof Error ? err.message : String(err)}`));
      return;
    }
  } finally {
    loggingOut = false;
  }
  showLogin();
}

function showShell() {
  stopReaching();
  runPageCleanup();
  view = 'shell';
  const logoutButton = h('button', { type: 'button', class: 'btn btn-quiet', onclick: () => void logout(logoutButton) }, 'Log out');
  pageMain = h('main', { id: 'page', class: 'page' });
  noticeArea = h('div', { class: 'notices' }, notices.map((n) => n.element));
  clear(app);
  app.appendChild(h('div', { class: 'shell' },
    h('header', { class: 'topbar' },
      h('span', { class: 'brand' }, PRODUCT),
      h('nav', { class: 'nav', 'aria-label': 'Main' },
        h('a', { href: '#/nodes', 'data-nav': 'nodes' }, 'Gateway › Nodes'),
        h('a', { href: '#/requests', 'data-nav': 'requests' }, 'Gateway › Requests')),
      logoutButton),
    noticeArea,
    pageMain));
  void route();
}

onUnauthenticated(() => {
  if (view === 'shell' && !loggingOut) showLogin(SESSION_ENDED, { sessionEnded: true });
});
window.addEventListener('hashchange', () => void route());

function stopReaching() {
  clearTimeout(reachTimer);
  reachTimer = undefined;
  reachTries = 0;
}

/**
 * Asks GET /api/console/session: 200 shows the shell, 401 the login form. Anything else (no
 * answer, a timeout, a 5xx from the control plane or a proxy in front of it) says nothing about the
 * session, which may well be live: the "cannot reach" view, trying again on its own, with back-off.
 */
async function boot() {
  clearTimeout(reachTimer);
  reachTimer = undefined;
  let session;
  try {
    session = await api('GET', '/api/console/session');
  } catch (err) {
    if (view === 'shell' || view === 'login') return; // logged in or shown the form meanwhile
    if (err?.status === 401) showLogin();
    else showUnreachable(err);
    return;
  }
  if (view === 'shell') return;
  setCsrfToken(session.csrfToken);
  publicUrl = session.publicUrl ?? null;
  showShell();
}

/** The session could not be asked for: what went wrong, the next try's time, and Try again. */
function showUnreachable(err) {
  view = 'unreachable';
  const wait = Math.min(REACH_RETRY_FIRST_MS * 2 ** reachTries, REACH_RETRY_MAX_MS);
  reachTries += 1;
  document.title = `Cannot reach the control plane · ${PRODUCT}`;
  const retry = h('button', {
    type: 'button', class: 'btn btn-primary',
    onclick: () => {
      retry.disabled = true;
      status.textContent = 'Trying again…';
      void boot();
    },
  }, 'Try again');
  const status = h('p', { class: 'muted', role: 'status', 'data-testid': 'unreachable-next-try' },
    `Trying again in ${Math.round(wait / 1000)} s.`);
  clear(app);
  app.appendChild(h('main', { class: 'login' },
    h('section', { class: 'login-card', 'aria-labelledby': 'unreachable-title', 'data-testid': 'unreachable' },
      h('h1', { id: 'unreachable-title' }, 'Cannot reach the control plane'),
      errorBanner(err instanceof Error ? err.message : String(err)),
      h('p', {}, 'The console could not ask the control plane for your session: it may be restarting, or the network '
        + 'may be down. The console shows itself as soon as the control plane answers; the admin token is asked for '
        + 'only if your session has ended.'),
      status,
      retry)));
  clearTimeout(reachTimer);
  reachTimer = setTimeout(() => {
    status.textContent = 'Trying again…';
    retry.disabled = true;
    void boot();
  }, wait);
}

void boot();
