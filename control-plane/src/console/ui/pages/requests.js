// Gateway › Requests (DESIGN §9, seed 004 §9.5): find one call by the x-request-id its caller got,
// and the recent requests, newest first. Reads only the admin API (docs/api.md, "Request records").
// Every value from a record is inserted as text: model names, error codes and bodies come from
// callers and upstreams.
//
// The list's filters (node, account, status) and its page (cursor) are in the address:
// #/requests?node=…&account=…&status=…&cursor=…, so Back (from a record, say) and a reload show the
// same list. What is read from the address is checked with the API's rules first; a value no filter
// could have is ignored (and said so). Each filter applied and each page turned is an entry of the
// browser's history; the cursors of the pages before the shown one ride along in that entry's state.

const PAGE_SIZE = 50;
const STATUSES = ['ok', 'rejected', 'failed', 'aborted', 'interrupted'];
const FRACTION_DIGITS = 6; // 1 unit = 1 000 000 micro-units (docs/billing.md)
// The stylesheet's status colours (console.css), by record status.
// The API's rules for the filters (http/requests.routes.ts), checked before a value read from the
// address, or typed, is sent: the node filter 1..64 characters (a name or an id), the account filter a
// name or id by the config-name rule, a cursor only the characters the API's cursors are made of.
const NODE_FILTER_MAX = 64;
const ACCOUNT_FILTER = /^[A-Za-z0-9._:/-]{1,128}$/;
const ACCOUNT_FILTER_RULE = 'must be 1 to 128 characters of letters, digits and . _ : / -';
const CURSOR = /^[A-Za-z0-9_.-]{1,1000}$/;
// NUL, other control characters and unpaired surrogates: no node name or id holds them.
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const NOT_IN_A_NAME = /[\u0000-\u001f\u007f]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const LIST_HASH = '#/requests';
const STATUS_CLASS = { ok: 'status-online', rejected: 'status-error', failed: 'status-error', aborted: 'status-pending', interrupted: 'status-pending' };

/**
 * Integer micro-units as a decimal with 6 places, by string arithmetic: a double cannot hold every
 * integer near or past 2^53 (9007199254740991 / 1e6 prints as …740992). Takes a bigint, a safe
 * integer or a string of digits; anything else is not an exact amount, and gives null.
 */
export function formatMicros(value) {
  let digits;
  if (typeof value === 'bigint') digits = value.toString();
  else if (typeof value === 'number' && Number.isSafeInteger(value)) digits = BigInt(value).toString();
  else if (typeof value === 'string' && /^-?\d+$/.test(value)) digits = value;
  else return null;
  const negative = digits.startsWith('-');
  digits = digits.replace(/^-/, '').replace(/^0+(?=\d)/, '').padStart(FRACTION_DIGITS + 1, '0');
  const sign = negative && /[1-9]/.test(digits) ? '-' : '';
  return `${sign}${digits.slice(0, -FRACTION_DIGITS)}.${digits.slice(-FRACTION_DIGITS)}`;
}

/** "1.234567 (1234567 micro-units)"; a value that is no exact integer (JSON.parse rounds past 2^53) says so. */
function moneyText(value) {
  const formatted = formatMicros(value);
  if (formatted === null) return `${String(value)} micro-units (not exact: beyond what the browser reads exactly)`;
  return `${formatted} (${String(value)} micro-units)`;
}

const text = (value) => (value === null || value === undefined || value === '' ? '—' : String(value));
/** 2026-11-02T09:00:01.250Z → 2026-11-02 09:00:01 (the whole instant is the cell's title). */
const shortTime = (iso) => (/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/.test(iso) ? iso.slice(0, 19).replace('T', ' ') : iso);
/**
 * A duration in ms as read: at most one decimal ("3.5 ms", "1850 ms"). The API gives the node's
 * measurement as it is (a fraction of a millisecond has 10+ digits); a non-number shows as it came.
 */
export function formatMs(value) {
  if (typeof value !== 'number' || !Number.isFinite(value)) return text(value);
  const rounded = Math.round(value * 10) / 10;
  return `${Object.is(rounded, -0) ? 0 : rounded} ms`;
}
const ms = formatMs;

/**
 * The API path of one record. "." and ".." cannot be sent as a path segment: URL parsing (fetch's
 * too) resolves them, even %-encoded, as steps up the path, so such an id is not asked for at all.
 */
function recordPath(requestId) {
  if (requestId === '.' || requestId === '..') return null;
  return `/api/v1/requests/${encodeURIComponent(requestId)}`;
}

/** A node filter's problem (as the API would word it), or undefined. */
function nodeFilterProblem(value) {
  if ([...value].length > NODE_FILTER_MAX) return `Node: must be at most ${NODE_FILTER_MAX} characters`;
  if (NOT_IN_A_NAME.test(value)) return 'Node: must not contain control characters';
  return undefined;
}

function accountFilterProblem(value) {
  return ACCOUNT_FILTER.test(value) ? undefined : `Account: ${ACCOUNT_FILTER_RULE}`;
}

/**
 * The list's filters and cursor from the route's query (a URLSearchParams): each kept only when it
 * is a value the filter can have; `ignored` names the others. Unknown keys are left alone.
 */
export function listFromQuery(query) {
  const filters = { node: '', account: '', status: '' };
  let cursor = null;
  const ignored = [];
  const one = (key) => (query?.has(key) ? query.get(key) : null);
  const node = one('node');
  if (node !== null && node !== '') {
    if (nodeFilterProblem(node) === undefined) filters.node = node;
    else ignored.push('node');
  }
  const account = one('account');
  if (account !== null && account !== '') {
    if (accountFilterProblem(account) === undefined) filters.account = account;
    else ignored.push('account');
  }
  const status = one('status');
  if (status !== null && status !== '') {
    if (STATUSES.includes(status)) filters.status = status;
    else ignored.push('status');
  }
  const cursorText = one('cursor');
  if (cursorText !== null && cursorText !== '') {
    if (CURSOR.test(cursorText)) cursor = cursorText;
    else ignored.push('cursor');
  }
  return { filters, cursor, ignored };
}

/** The address of the list with these filters at this cursor (null: the first page). */
export function listHash(filters, cursor) {
  const query = new URLSearchParams();
  if (filters.node !== '') query.set('node', filters.node);
  if (filters.account !== '') query.set('account', filters.account);
  if (filters.status !== '') query.set('status', filters.status);
  if (cursor !== null) query.set('cursor', cursor);
  const text = query.toString();
  return text === '' ? LIST_HASH : `${LIST_HASH}?${text}`;
}

// The list last shown, and the cursors of the pages before it (null: not known): the record's
// "← Recent requests" link goes back to it, and it keeps its page number and Previous page when
// reached that way. Module memory only: a reload forgets it (the history entry's state does not).
let lastList = { hash: LIST_HASH, before: [] };

/**
 * The cursors of the pages before the one at `cursor` ([] for the first page, [null] for the
 * second, [null, c2] for the third…), from the history entry's state or the list last shown; null
 * when not known (an address opened afresh on a later page).
 */
function pagesBefore(hash, cursor) {
  if (cursor === null) return [];
  const valid = (list) => Array.isArray(list) && list.length >= 1 && list.length <= 10_000 && list[0] === null
    && list.slice(1).every((c) => typeof c === 'string' && CURSOR.test(c));
  const state = history.state;
  if (state && typeof state === 'object' && state.requestsHash === hash && valid(state.requestsBefore)) return state.requestsBefore;
  if (lastList.hash === hash && valid(lastList.before)) return lastList.before;
  return null;
}

function errorMessage(err) {
  if (err && typeof err.message === 'string' && err.message !== '') return err.message;
  return 'The control plane could not be reached; try again.';
}

export function render(root, params, ctx) {
  const { api, navigate, h, clear } = ctx;
  let disposed = false;
  // Bumped by every query: an answer that arrives after a newer query (or after leaving) is dropped.
  let generation = 0;

  const errorBanner = (message) => h('div', { class: 'banner banner-error', role: 'alert', 'data-testid': 'error' }, message);
  const statusBadge = (status) => h('span', { class: `status ${STATUS_CLASS[status] ?? ''}` }, status);
  const pre = (value, testid) => {
    const el = h('pre', { class: 'code', 'data-testid': testid }, value);
    // Bodies are long single lines (JSON): wrap them rather than widen the page.
    el.style.whiteSpace = 'pre-wrap';
    el.style.overflowWrap = 'anywhere';
    el.style.maxHeight = '24rem';
    el.style.overflow = 'auto';
    el.style.padding = '0.6rem 0.8rem';
    return el;
  };
  const spaced = (el) => {
    el.style.marginTop = '1rem';
    return el;
  };
  const table = (label, headers, rows, testid) => h('table', { class: 'table', 'aria-label': label, 'data-testid': testid },
    h('thead', {}, h('tr', {}, headers.map((name) => h('th', {}, name)))),
    h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((cell) => h('td', {}, cell))))),
  );

  const requestId = typeof params?.requestId === 'string' ? params.requestId : undefined;

  const input = h('input', {
    id: 'request-id-input', name: 'requestId', type: 'text', placeholder: 'req_…', value: requestId ?? '',
    autocomplete: 'off', spellcheck: 'false', 'aria-describedby': 'request-id-hint',
  });
  // console.css gives text inputs the full width; here each shares its row with a button.
  input.style.width = 'auto';
  input.style.flex = '1 1 24rem';
  const formProblem = h('div', {});
  const findForm = h('form', {
    class: 'card', role: 'search', 'aria-labelledby': 'find-request-title',
    onsubmit: (event) => {
      event.preventDefault();
      // Pasted ids often carry a space or line break; the ids nodes mint (req_…) never do.
      const id = input.value.trim();
      clear(formProblem);
      if (id === '') {
        formProblem.append(errorBanner('Enter the x-request-id of the call: the header of the node\'s answer to it.'));
        input.focus();
        return;
      }
      navigate(`#/requests/${encodeURIComponent(id)}`);
    },
  },
  h('h2', { id: 'find-request-title' }, 'Find a call by x-request-id'),
  h('div', { class: 'field' },
    h('label', { for: 'request-id-input' }, 'x-request-id'),
    h('div', { class: 'row' }, input, h('button', { type: 'submit', class: 'btn btn-primary' }, 'Find')),
    h('p', { id: 'request-id-hint', class: 'hint' },
      'The x-request-id header of the node\'s answer. A request shows here once its node has delivered its record.')),
  formProblem);

  const body = h('div', {});
  root.append(h('div', { class: 'page-header' }, h('h1', {}, 'Gateway › Requests')), findForm, body);

  if (requestId !== undefined) void showRecord(requestId);
  else showRecent(listFromQuery(params?.query));

  return () => {
    disposed = true;
    generation += 1;
  };

  // ---- one record ----

  async function showRecord(id) {
    const mine = ++generation;
    body.append(h('p', {}, h('a', { href: lastList.hash }, '← Recent requests')));
    const path = recordPath(id);
    if (path === null) {
      body.append(errorBanner(`A request id of "${id}" cannot be looked up: a browser cannot send it as part of an address.`));
      return;
    }
    const loading = h('p', { class: 'muted', role: 'status' }, 'Loading…');
    body.append(loading);
    let answer;
    try {
      answer = await api('GET', path);
    } catch (err) {
      if (disposed || mine !== generation) return;
      loading.remove();
      // The API's own message: not delivered (yet), or set aside and why.
      body.append(errorBanner(errorMessage(err)));
      return;
    }
    if (disposed || mine !== generation) return;
    loading.remove();
    body.append(recordView(answer.request));
  }

  function recordView(r) {
    const field = (name, label, value) => [h('dt', {}, label), h('dd', { 'data-testid': `request-field-${name}` }, value)];
    const usage = r.usage;
    const t = r.timings;
    const stages = Object.entries(t.stagesUs ?? {});
    return h('section', { class: 'stack', 'data-testid': 'request-detail', 'aria-labelledby': 'request-title' },
      h('div', { class: 'card' },
        h('h2', { id: 'request-title' }, 'Request ', h('span', { class: 'code' }, r.requestId)),
        h('dl', { class: 'props' },
          field('requestId', 'x-request-id', r.requestId),
          field('clientRequestId', 'Caller\'s own id', text(r.clientRequestId)),
          field('node', 'Node', r.node.name === null ? `${r.node.id} (deleted)` : `${r.node.name} (${r.node.id})`),
          field('receivedAt', 'Received', r.receivedAt),
          field('finishedAt', 'Finished', r.finishedAt),
          field('api', 'API', r.api),
          field('surface', 'Surface', r.surface),
          field('stream', 'Stream', r.stream ? 'yes' : 'no'),
          field('configVersion', 'Config version', text(r.configVersion)),
          field('key', 'Key', text(r.keyId)),
          field('account', 'Account', text(r.accountId)),
          field('model', 'Model', text(r.model)),
          field('upstream', 'Upstream', text(r.upstream)),
          field('upstreamModel', 'Upstream model', text(r.upstreamModel)),
          field('status', 'Status', statusBadge(r.status)),
          field('httpStatus', 'HTTP status', String(r.httpStatus)),
          field('errorCode', 'Error code', text(r.errorCode)),
          field('inputTokens', 'Input tokens', String(usage.inputTokens)),
          field('outputTokens', 'Output tokens', String(usage.outputTokens)),
          field('estimated', 'Tokens estimated', usage.estimated ? 'yes (the upstream gave no usage)' : 'no'),
          field('cost', 'Cost', moneyText(r.cost.costMicros)),
          field('reserved', 'Reserved', moneyText(r.cost.reservedMicros)),
          field('priced', 'Priced', r.cost.priced ? 'yes' : 'no (nothing to charge: the model had no price, or the request no valid account key)'),
          field('lease', 'Lease', text(r.cost.leaseId)),
          field('ingestedAt', 'Delivered to the control plane', r.ingestedAt),
        )),
      h('div', { class: 'card' },
        h('h3', {}, 'Timings'),
        h('dl', { class: 'props' },
          field('totalMs', 'Total', ms(t.totalMs)),
          field('upstreamFirstByteMs', 'Upstream first byte', ms(t.upstreamFirstByteMs)),
          field('upstreamMs', 'Upstream', ms(t.upstreamMs)),
        ),
        spaced(h('h3', {}, 'Per stage (µs)')),
        stages.length === 0
          ? h('p', { class: 'muted' }, 'No stage timings.')
          : table('Per stage (µs)', ['Stage', 'µs'], stages.map(([stage, us]) => [stage, String(us)]), 'request-stages')),
      h('div', { class: 'card' },
        h('h3', {}, 'Guardrail verdicts'),
        r.guardrails.length === 0
          ? h('p', { class: 'muted' }, 'No guardrail matched.')
          : table('Guardrail verdicts', ['Policy', 'Rule', 'Detector', 'Action', 'On', 'Matches'],
            r.guardrails.map((g) => [g.policyId, String(g.rule), g.detector, g.action, g.on, String(g.matches)]), 'request-guardrails')),
      h('div', { class: 'card' },
        h('h3', {}, 'Upstream attempts'),
        r.attempts.length === 0
          ? h('p', { class: 'muted' }, 'Not forwarded upstream.')
          : table('Upstream attempts', ['#', 'Upstream', 'Model', 'Outcome', 'HTTP status', 'Duration'],
            r.attempts.map((a, i) => [String(i + 1), a.upstream, a.model, a.outcome, text(a.httpStatus), ms(a.durationMs)]), 'request-attempts')),
      h('div', { class: 'card', 'data-testid': 'request-bodies' },
        h('h3', {}, 'Bodies'),
        bodiesView(r.bodies)),
    );
  }

  function bodiesView(bodies) {
    if (bodies === null || bodies === undefined) {
      return h('p', { class: 'muted' }, 'No bodies kept: a refused request, or a spool keeping metering only.');
    }
    const one = (label, name, value) => [
      h('h4', {}, label),
      value === null ? h('p', { class: 'muted' }, 'None.') : pre(value, `request-body-${name}`),
    ];
    return [
      h('p', { 'data-testid': 'request-bodies-truncated' },
        bodies.truncated ? 'Truncated: yes (cut to the spool\'s size limit).' : 'Truncated: no.'),
      one('Request body', 'request', bodies.request),
      one('Response body', 'response', bodies.response),
    ];
  }

  // ---- recent requests ----

  function showRecent(fromAddress) {
    // The filters of the list shown (pages keep them, whatever is typed meanwhile), from the address.
    let applied = fromAddress.filters;
    let cursor = fromAddress.cursor;
    // The cursors of the pages before this one ([]: this is the first; null: not known, the address
    // was opened afresh on a later page).
    let before = pagesBefore(location.hash, cursor);
    const nodeInput = h('input', { id: 'requests-filter-node', name: 'node', type: 'text', placeholder: 'name or id', autocomplete: 'off', value: applied.node });
    const accountInput = h('input', { id: 'requests-filter-account', name: 'account', type: 'text', placeholder: 'name or id', autocomplete: 'off', value: applied.account });
    const statusSelect = h('select', { id: 'requests-filter-status', name: 'status', value: applied.status },
      h('option', { value: '' }, 'any'),
      STATUSES.map((s) => h('option', { value: s }, s)),
    );
    const filterProblem = h('div', {});
    if (fromAddress.ignored.length > 0) {
      filterProblem.append(h('p', { class: 'banner banner-info', role: 'status', 'data-testid': 'requests-ignored' },
        `Ignored from the address (not a value this list takes): ${fromAddress.ignored.join(', ')}.`));
    }
    remember();
    nodeInput.style.width = '16rem';
    accountInput.style.width = '16rem';
    statusSelect.style.width = 'auto';
    const results = h('div', {});
    // Twelve columns: scroll sideways on a narrow window rather than overflow the card.
    results.style.overflowX = 'auto';
    function remember() {
      lastList = { hash: listHash(applied, cursor), before };
    }
    const pageLabel = () => (before === null ? 'A later page' : `Page ${before.length + 1}`);

    const load = async () => {
      const mine = ++generation;
      const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
      if (applied.node !== '') query.set('node', applied.node);
      if (applied.account !== '') query.set('account', applied.account);
      if (applied.status !== '') query.set('status', applied.status);
      if (cursor !== null) query.set('cursor', cursor);
      results.setAttribute('aria-busy', 'true');
      let answer;
      try {
        answer = await api('GET', `/api/v1/requests?${query.toString()}`);
      } catch (err) {
        if (disposed || mine !== generation) return;
        results.removeAttribute('aria-busy');
        clear(results);
        // The page asked for stays where it was: tried again, or left for the one before it, so a
        // failed page (a 503, a timeout) does not send the operator back to page 1 of a long list.
        results.append(
          errorBanner(errorMessage(err)),
          h('div', { class: 'toolbar' },
            h('span', { class: 'muted', 'data-testid': 'requests-page' }, pageLabel()),
            h('button', { type: 'button', class: 'btn btn-small', onclick: () => void load() }, 'Try again'),
            cursor !== null ? h('button', { type: 'button', class: 'btn btn-small', onclick: previousPage }, 'Previous page') : null,
          ),
        );
        return;
      }
      if (disposed || mine !== generation) return;
      results.removeAttribute('aria-busy');
      clear(results);
      results.append(...recentTable(answer));
    };

    /**
     * Shows the list with these filters at this cursor: a new entry of the browser's history (its
     * address the list's, its state the cursors before it), loaded in place.
     */
    const goTo = (filters, nextCursor, nextBefore) => {
      applied = filters;
      cursor = nextCursor;
      before = nextBefore;
      const hash = listHash(applied, cursor);
      if (hash !== location.hash) history.pushState({ requestsHash: hash, requestsBefore: before }, '', hash);
      clear(filterProblem);
      remember();
      void load();
    };
    const applyFilters = (event) => {
      event?.preventDefault();
      const filters = { node: nodeInput.value.trim(), account: accountInput.value.trim(), status: statusSelect.value };
      const problem = (filters.node === '' ? undefined : nodeFilterProblem(filters.node))
        ?? (filters.account === '' ? undefined : accountFilterProblem(filters.account));
      clear(filterProblem);
      if (problem !== undefined) {
        filterProblem.append(errorBanner(problem));
        return;
      }
      goTo(filters, null, []);
    };
    const previousPage = () => {
      // Unknown (opened afresh on a later page): the first page is the one before that is known.
      if (before === null || before.length <= 1) goTo(applied, null, []);
      else goTo(applied, before[before.length - 1], before.slice(0, -1));
    };

    const recentTable = (answer) => {
      const rows = answer.requests;
      const later = cursor !== null;
      const pager = h('div', { class: 'toolbar' },
        h('span', { class: 'muted', 'data-testid': 'requests-page' }, pageLabel()),
        later ? h('button', { type: 'button', class: 'btn btn-small', onclick: () => goTo(applied, null, []) }, 'First page') : null,
        later ? h('button', { type: 'button', class: 'btn btn-small', onclick: previousPage }, 'Previous page') : null,
        answer.nextCursor !== null
          ? h('button', { type: 'button', class: 'btn btn-small', onclick: () => goTo(applied, answer.nextCursor, before === null ? null : [...before, cursor]) }, 'Next page')
          : h('span', { class: 'muted', 'data-testid': 'requests-last-page' }, 'No more requests.'),
      );
      if (rows.length === 0) {
        return [h('p', { 'data-testid': 'requests-empty' },
          'No requests match. A request shows here once the node that served it has delivered its record.'), pager];
      }
      const headers = ['Received (UTC)', 'x-request-id', 'Node', 'API', 'Key', 'Model', 'Status', 'HTTP', 'Error code', 'Tokens in / out', 'Cost', 'Total'];
      return [
        h('table', { class: 'table', 'aria-label': 'Recent requests', 'data-testid': 'requests-table' },
          h('thead', {}, h('tr', {}, headers.map((name) => h('th', {}, name)))),
          h('tbody', {}, rows.map((r) => h('tr', { 'data-testid': `request-row-${r.requestId}`, 'data-status': r.status },
            h('td', { class: 'nowrap', title: r.receivedAt }, shortTime(r.receivedAt)),
            h('td', { class: 'mono' }, h('a', { href: `#/requests/${encodeURIComponent(r.requestId)}` }, r.requestId)),
            h('td', { class: 'nowrap' }, r.node.name ?? r.node.id),
            h('td', {}, r.api),
            h('td', { class: 'nowrap' }, text(r.keyId)),
            h('td', {}, text(r.model)),
            h('td', {}, statusBadge(r.status)),
            h('td', {}, String(r.httpStatus)),
            h('td', {}, text(r.errorCode)),
            h('td', { class: 'num nowrap' }, `${r.usage.inputTokens} / ${r.usage.outputTokens}${r.usage.estimated ? ' (est.)' : ''}`),
            h('td', { class: 'num nowrap' }, formatMicros(r.costMicros) ?? String(r.costMicros)),
            h('td', { class: 'num nowrap' }, ms(r.totalMs)),
          )))),
        pager,
      ];
    };

    statusSelect.addEventListener('change', applyFilters);
    body.append(h('div', { class: 'card' },
      h('h2', {}, 'Recent requests'),
      h('form', { class: 'toolbar', 'aria-label': 'Filters', onsubmit: applyFilters },
        h('label', { for: 'requests-filter-node' }, 'Node'), nodeInput,
        h('label', { for: 'requests-filter-account' }, 'Account'), accountInput,
        h('label', { for: 'requests-filter-status' }, 'Status'), statusSelect,
        h('button', { type: 'submit', class: 'btn' }, 'Apply')),
      filterProblem,
      results));
    void load();
  }
}
