// Gateway › Nodes: the node list (seed 004 §9.5 columns), refreshed every 5 s in place.
// Also exports the figure formats the add-node and node-detail pages share, so a figure reads the
// same on every page (and as `zenova gateway-node list` prints it).
import { serverNow } from '../api.js';

const REFRESH_MS = 5_000;
/** Beyond this skew a node's host clock needs syncing (edge-node's CLOCK_SKEW limit). */
export const CLOCK_SKEW_WARN_MS = 30_000;
export const MISSING = '-';

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/** Bytes in binary units, as the CLI prints them ("4.0 KiB"). */
export function formatBytes(bytes) {
  if (typeof bytes !== 'number') return MISSING;
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const digits = unit === 0 || value >= 100 ? 0 : 1;
  return `${value.toFixed(digits)} ${BYTE_UNITS[unit]}`;
}

/**
 * How long ago an ISO time was, coarsely ("12s ago"); "never" for null. Measured on the control
 * plane's clock, which stamped the time: this browser's may be off.
 */
export function formatAge(iso, now = serverNow()) {
  if (iso === null || iso === undefined) return 'never';
  const then = Date.parse(iso);
  if (Number.isNaN(then)) return iso;
  const seconds = Math.max(0, Math.round((now - then) / 1000));
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)}h ago`;
  return `${Math.floor(seconds / 86_400)}d ago`;
}

/** The API's 0..1 ratio (4 decimals) as a percentage: two decimals keep all of it. */
export function formatRate(ratio) {
  return typeof ratio === 'number' ? `${(ratio * 100).toFixed(2)}%` : MISSING;
}

export function formatCount(value) {
  return typeof value === 'number' ? String(value) : MISSING;
}

/** "+212 ms", "-4 min 0 s"; "-" before a heartbeat measured it. */
export function formatSkew(skewMs) {
  if (typeof skewMs !== 'number') return MISSING;
  const sign = skewMs < 0 ? '-' : '+';
  const abs = Math.abs(Math.round(skewMs));
  if (abs < 1000) return `${sign}${abs} ms`;
  const seconds = Math.round(abs / 1000);
  if (seconds < 60) return `${sign}${(abs / 1000).toFixed(1)} s`;
  const hours = Math.floor(seconds / 3600);
  const minutes = Math.floor((seconds % 3600) / 60);
  return hours > 0 ? `${sign}${hours} h ${minutes} min` : `${sign}${minutes} min ${seconds % 60} s`;
}

export function skewNeedsSync(node) {
  return typeof node.clockSkewMs === 'number' && Math.abs(node.clockSkewMs) > CLOCK_SKEW_WARN_MS;
}

/** Text the node or control plane wrote, on one line (control characters become spaces). */
export function oneLine(text) {
  return String(text).replace(/\p{Cc}+/gu, ' ');
}

export const STATUS_TEXT = { online: 'Online', offline: 'Offline', pending: 'Pending', unknown: 'Unknown' };
const STATUS_TITLE = {
  unknown: 'Not known now: the control plane did not answer the last refresh',
  pending: 'No heartbeat yet: the node has not connected since it was created',
  online: 'Heartbeats arriving',
  offline: 'No heartbeat for longer than the offline timeout (2 min by default); the node keeps serving with its last config',
};

/** A status badge: the word, a class per status, and what it means on hover. */
export function statusBadge(h, status) {
  const badge = h('span', { class: `status status-${status}`, 'data-status': status }, STATUS_TEXT[status] ?? status);
  badge.title = STATUS_TITLE[status] ?? '';
  return badge;
}

/** The banner showing what the API (or the network) said; one per page, replaced each time. */
export function showError(root, where, h, err) {
  hideError(root);
  const message = err instanceof Error ? err.message : String(err);
  const banner = h('div', { class: 'banner banner-error', role: 'alert', 'data-testid': 'error' }, message);
  where.prepend(banner);
  return banner;
}

export function hideError(root) {
  for (const banner of root.querySelectorAll('[data-testid="error"]')) banner.remove();
}

/** The control plane's time now as hh:mm:ss UTC, for "as of" notes. */
export function serverTimeOfDay(ms = serverNow()) {
  return `${new Date(ms).toISOString().slice(11, 19)} UTC`;
}

/**
 * The message of a refresh that failed while older figures are on screen: the API's (or the
 * timeout's) words, and that what is shown is no longer current.
 */
export function staleMessage(err, asOf) {
  const message = err instanceof Error ? err.message : String(err);
  return `${message} Showing what the control plane answered at ${serverTimeOfDay(asOf)}: `
    + 'status and heartbeat ages are unknown until it answers again.';
}

/**
 * The path of one node in the admin API (names are [a-z0-9-], encoded anyway), or null for "." and
 * "..": URL parsing (fetch's too) resolves them, even %-encoded, as steps up the path, so such a
 * name (never a node's) is not asked for at all.
 */
export function nodePath(name, suffix = '') {
  if (name === '.' || name === '..') return null;
  return `/api/v1/nodes/${encodeURIComponent(name)}${suffix}`;
}

// One column per figure of seed 004 §9.5, keyed so a refresh updates cells in place.
const COLUMNS = [
  { key: 'status', header: 'Status' },
  { key: 'name', header: 'Name' },
  { key: 'region', header: 'Region' },
  { key: 'version', header: 'Version' },
  { key: 'configVersionsBehind', header: 'Config versions behind', numeric: true },
  { key: 'lastHeartbeatAt', header: 'Last heartbeat' },
  { key: 'requests5m', header: 'Requests (5 min)', numeric: true },
  { key: 'errorRate5m', header: 'Error rate (5 min)', numeric: true },
  { key: 'backfillBacklog', header: 'Backfill backlog', numeric: true },
  { key: 'spoolBytes', header: 'Local spool', numeric: true },
];

/** The text (and hover title) of one cell. */
function cellContent(key, node, now) {
  switch (key) {
    case 'region': return { text: node.region || MISSING };
    case 'version': return { text: node.version || MISSING };
    case 'configVersionsBehind': return { text: formatCount(node.configVersionsBehind) };
    case 'lastHeartbeatAt':
      return { text: formatAge(node.lastHeartbeatAt, now), title: node.lastHeartbeatAt ?? 'No heartbeat yet' };
    case 'requests5m': return { text: formatCount(node.requests5m) };
    case 'errorRate5m': return { text: formatRate(node.errorRate5m) };
    case 'backfillBacklog': return { text: formatCount(node.backfillBacklog), title: 'Request records waiting to be sent back' };
    case 'spoolBytes':
      return {
        text: formatBytes(node.spoolBytes),
        // null before the node's first heartbeat: nothing measured yet.
        title: typeof node.spoolBytes === 'number' ? `${node.spoolBytes} bytes of ${node.spoolQuotaGb} GiB` : 'No heartbeat yet',
      };
    default: return { text: String(node[key] ?? MISSING) };
  }
}

export function render(root, _params, ctx) {
  const { h, api, navigate } = ctx;
  let stopped = false;
  let timer;
  /** The control plane's time of the last answer shown; null before the first. */
  let answeredAt = null;
  /** name → its <tr>, so a refresh changes only the cells whose text changed. */
  const rows = new Map();

  const addButton = h('button', { type: 'button', class: 'btn btn-primary', onclick: () => navigate('#/add-node') }, 'Add node');
  const header = h('div', { class: 'page-header' }, h('h1', {}, 'Nodes'), addButton);
  const intro = h('p', { class: 'muted' },
    'Gateway nodes serve callers near them; each connects to the control plane, takes its config and sends heartbeats. '
    + 'The list refreshes every 5 seconds.');
  const body = h('div', { class: 'page-body' });
  root.append(header, intro, body);

  const tbody = h('tbody');
  const table = h('table', { class: 'table nodes-table', 'aria-label': 'Gateway nodes' },
    h('thead', {}, h('tr', {}, ...COLUMNS.map((c) => h('th', c.numeric ? { class: 'num' } : {}, c.header)))),
    tbody);
  // Eleven columns: scroll sideways on a narrow window rather than overflow the page.
  const tableScroll = h('div', { class: 'table-scroll', 'data-testid': 'nodes-table-scroll' }, table);
  const empty = h('div', { class: 'card', 'data-testid': 'nodes-empty' },
    h('p', {}, 'No gateway nodes yet.'),
    h('p', {}, 'Add one with “Add node”: the wizard creates the node and gives you its one-time install command to run on the node host.'));
  const noteList = h('ul', {});
  const notes = h('div', { class: 'banner banner-warning', 'aria-label': 'Notes' }, noteList);
  // Apart from the table above it (CSSOM styles are allowed under the CSP; style attributes are not).
  notes.style.marginTop = '1rem';
  const loading = h('p', { class: 'muted', role: 'status' }, 'Loading nodes…');
  body.append(loading);

  function newRow(node) {
    const tr = h('tr', { class: 'clickable', 'data-testid': `node-row-${node.name}` });
    tr.addEventListener('click', (event) => {
      // The name link navigates itself; any other click on the row opens the detail too.
      if (event.target instanceof Element && event.target.closest('a')) return;
      navigate(`#/nodes/${encodeURIComponent(node.name)}`);
    });
    for (const column of COLUMNS) {
      const td = h('td', { ...(column.numeric ? { class: 'num' } : {}), 'data-col': column.key });
      if (column.key === 'name') td.append(h('a', { href: `#/nodes/${encodeURIComponent(node.name)}` }, node.name));
      tr.append(td);
    }
    return tr;
  }

  function updateRow(tr, node, now) {
    for (const [index, column] of COLUMNS.entries()) {
      const td = tr.children[index];
      if (column.key === 'name') continue;
      if (column.key === 'status') {
        if (td.firstElementChild?.dataset.status !== node.status) td.replaceChildren(statusBadge(h, node.status));
        continue;
      }
      const { text, title } = cellContent(column.key, node, now);
      if (td.textContent !== text) td.textContent = text;
      if ((title ?? '') !== td.title) td.title = title ?? '';
    }
  }

  function renderNotes(nodes) {
    const items = [];
    for (const node of nodes) {
      if (node.configError) {
        items.push(h('li', {},
          `Node ${node.name} did not apply config version ${node.configError.version} (${oneLine(node.configError.code)}) `
          + 'and keeps serving its last good config; open it to see why.'));
      }
      if (skewNeedsSync(node)) {
        items.push(h('li', {},
          `Node ${node.name}'s clock is ${formatSkew(Math.abs(node.clockSkewMs)).slice(1)} `
          + `${node.clockSkewMs > 0 ? 'ahead of' : 'behind'} the control plane's; sync its host clock (NTP).`));
      }
    }
    noteList.replaceChildren(...items);
    notes.hidden = items.length === 0;
  }

  /**
   * The refresh failed: the rows stay, but a status or an age read from them would be stale
   * ("Online, 1s ago" long after): both become unknown until the next answer.
   */
  function markStale() {
    table.classList.add('stale');
    const statusIndex = COLUMNS.findIndex((c) => c.key === 'status');
    const ageIndex = COLUMNS.findIndex((c) => c.key === 'lastHeartbeatAt');
    for (const tr of rows.values()) {
      const statusCell = tr.children[statusIndex];
      if (statusCell.firstElementChild?.dataset.status !== 'unknown') statusCell.replaceChildren(statusBadge(h, 'unknown'));
      const ageCell = tr.children[ageIndex];
      ageCell.textContent = 'unknown';
      ageCell.title = ageCell.title.startsWith('Last known: ') ? ageCell.title : `Last known: ${ageCell.title}`;
    }
  }

  function show(nodes) {
    loading.remove();
    table.classList.remove('stale');
    const now = serverNow();
    if (nodes.length === 0) {
      rows.clear();
      tbody.replaceChildren();
      body.replaceChildren(empty);
      return;
    }
    if (!table.isConnected) body.replaceChildren(tableScroll, notes);
    const seen = new Set();
    const ordered = [];
    for (const node of nodes) {
      seen.add(node.name);
      let tr = rows.get(node.name);
      if (!tr) {
        tr = newRow(node);
        rows.set(node.name, tr);
      }
      updateRow(tr, node, now);
      ordered.push(tr);
    }
    for (const [name, tr] of rows) {
      if (!seen.has(name)) {
        tr.remove();
        rows.delete(name);
      }
    }
    // Re-append only when the order changed: moving a row would drop the focus inside it.
    const inOrder = ordered.length === tbody.children.length && ordered.every((tr, i) => tbody.children[i] === tr);
    if (!inOrder) tbody.replaceChildren(...ordered);
    renderNotes(nodes);
  }

  async function refresh() {
    try {
      const answer = await api('GET', '/api/v1/nodes');
      if (stopped) return;
      hideError(root);
      answeredAt = serverNow();
      show(answer.nodes);
    } catch (err) {
      if (stopped) return;
      loading.remove();
      const stale = answeredAt !== null && rows.size > 0 && err?.status !== 401;
      showError(root, body, h, stale ? new Error(staleMessage(err, answeredAt)) : err);
      if (stale) markStale();
      // Signed out: the login view takes over; polling on would only repeat the 401.
      if (err?.status === 401) return;
    }
    if (!stopped) timer = setTimeout(() => { void refresh(); }, REFRESH_MS);
  }

  void refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
