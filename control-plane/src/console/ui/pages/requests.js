// Gateway › Requests (DESIGN §9, seed 004 §9.5): find one call by the x-request-id its caller got,
// and the recent requests, newest first. Reads only the admin API (docs/api.md, "Request records").
// Every value from a record is inserted as text: model names, error codes and bodies come from
// callers and upstreams.

const PAGE_SIZE = 50;
const STATUSES = ['ok', 'rejected', 'failed', 'aborted', 'interrupted'];
const FRACTION_DIGITS = 6; // 1 unit = 1 000 000 micro-units (docs/billing.md)
// The stylesheet's status colours (console.css), by record status.
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
const ms = (value) => (value === null || value === undefined ? '—' : `${value} ms`);

/**
 * The API path of one record. "." and ".." cannot be sent as a path segment: URL parsing (fetch's
 * too) resolves them, even %-encoded, as steps up the path, so such an id is not asked for at all.
 */
function recordPath(requestId) {
  if (requestId === '.' || requestId === '..') return null;
  return `/api/v1/requests/${encodeURIComponent(requestId)}`;
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
  else showRecent();

  return () => {
    disposed = true;
    generation += 1;
  };

  // ---- one record ----

  async function showRecord(id) {
    const mine = ++generation;
    body.append(h('p', {}, h('a', { href: '#/requests' }, '← Recent requests')));
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

  function showRecent() {
    const nodeInput = h('input', { id: 'requests-filter-node', name: 'node', type: 'text', placeholder: 'name or id', autocomplete: 'off' });
    const accountInput = h('input', { id: 'requests-filter-account', name: 'account', type: 'text', placeholder: 'name or id', autocomplete: 'off' });
    const statusSelect = h('select', { id: 'requests-filter-status', name: 'status' },
      h('option', { value: '' }, 'any'),
      STATUSES.map((s) => h('option', { value: s }, s)),
    );
    nodeInput.style.width = '16rem';
    accountInput.style.width = '16rem';
    statusSelect.style.width = 'auto';
    const results = h('div', {});
    // Twelve columns: scroll sideways on a narrow window rather than overflow the card.
    results.style.overflowX = 'auto';
    // The filters of the list shown (pages keep them, whatever is typed meanwhile) and the cursor of
    // each page shown so far: [null] is the first page.
    let applied = { node: '', account: '', status: '' };
    let cursors = [null];

    const load = async () => {
      const mine = ++generation;
      const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
      if (applied.node !== '') query.set('node', applied.node);
      if (applied.account !== '') query.set('account', applied.account);
      if (applied.status !== '') query.set('status', applied.status);
      const cursor = cursors[cursors.length - 1];
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
            h('span', { class: 'muted', 'data-testid': 'requests-page' }, `Page ${cursors.length}`),
            h('button', { type: 'button', class: 'btn btn-small', onclick: () => void load() }, 'Try again'),
            cursors.length > 1 ? h('button', { type: 'button', class: 'btn btn-small', onclick: () => goTo(cursors.slice(0, -1)) }, 'Previous page') : null,
          ),
        );
        return;
      }
      if (disposed || mine !== generation) return;
      results.removeAttribute('aria-busy');
      clear(results);
      results.append(...recentTable(answer, cursors.length));
    };

    const applyFilters = (event) => {
      event?.preventDefault();
      applied = { node: nodeInput.value.trim(), account: accountInput.value.trim(), status: statusSelect.value };
      cursors = [null];
      void load();
    };
    const goTo = (nextCursors) => {
      cursors = nextCursors;
      void load();
    };

    const recentTable = (answer, pageNumber) => {
      const rows = answer.requests;
      const pager = h('div', { class: 'toolbar' },
        h('span', { class: 'muted', 'data-testid': 'requests-page' }, `Page ${pageNumber}`),
        pageNumber > 1 ? h('button', { type: 'button', class: 'btn btn-small', onclick: () => goTo([null]) }, 'First page') : null,
        pageNumber > 1 ? h('button', { type: 'button', class: 'btn btn-small', onclick: () => goTo(cursors.slice(0, -1)) }, 'Previous page') : null,
        answer.nextCursor !== null
          ? h('button', { type: 'button', class: 'btn btn-small', onclick: () => goTo([...cursors, answer.nextCursor]) }, 'Next page')
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
      results));
    void load();
  }
}
