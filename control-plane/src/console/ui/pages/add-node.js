// Gateway › Nodes › Add node: the four-step wizard of seed 004 §9.3, then the one-time install
// command (§9.3/§9.4) and the live onboarding progress (§9.5). The client checks mirror the API's
// (control-plane/src/nodes/node-validation.ts) for instant feedback; the API still decides, and its
// refusal is always shown as it wrote it. Also exports the command view and the onboarding
// progress, which the node detail page shows too.
import { hideError, nodePath, showError } from './nodes-list.js';
import { TIMEOUT_MESSAGE } from '../api.js';

const ONBOARDING_POLL_MS = 2_000;
export const DEFAULT_INSTALL_DIR = '/opt/zenova-node';
export const CA_FILE_NAME = 'zenova-control-plane-ca.pem';
const NODE_PACKAGE_FILE = 'zenova-node.zpkg';

// ---- the API's field rules, in the API's words ----

export const NAME_RULE = 'must be 2 to 31 characters of lowercase letters, digits and hyphens';
// As proto/src/install-dir-rules.ts has them (test/console/wizard-install-dir-roots-match-the-api.test.ts).
const FORBIDDEN_INSTALL_ROOTS = ['/tmp', '/var/tmp', '/home', '/root', '/run/user', '/usr', '/etc', '/boot', '/run', '/var/run', '/dev', '/proc', '/sys'];
const FORBIDDEN_ROOT_REASONS = {
  '/run': 'a tmpfs, wiped on reboot',
  '/var/run': 'a link to /run, a tmpfs wiped on reboot',
  '/dev': 'device files and /dev/shm, a tmpfs: not a real disk',
  '/proc': 'a kernel pseudo filesystem, not a real disk',
  '/sys': 'a kernel pseudo filesystem, not a real disk',
};
const CENTRAL_INSTALL_DIR = '/opt/zenova';
export const SPOOL_QUOTA_GB = { min: 1, max: 10_000, default: 10 };
export const REPLICAS = { min: 1, max: 16, default: 1 };
const MAX_CA_PEM_CHARS = 64 * 1024;
const MAX_CA_CERTIFICATES = 16;

export function nameProblem(value) {
  if (value === '') return 'is required';
  if (!/^[a-z0-9-]{2,31}$/.test(value)) return NAME_RULE;
  if (value.startsWith('-') || value.endsWith('-')) return 'must begin and end with a letter or digit';
  return undefined;
}

export function regionProblem(value) {
  const region = value.trim().normalize('NFC');
  if (region === '') return undefined;
  if (Array.from(region).length > 64 || !/^(?:[\p{L}\p{N}]\p{M}*|[ ._()/-])+$/u.test(region)) {
    return 'must be at most 64 characters of letters, digits, spaces and . _ ( ) / -';
  }
  return undefined;
}

const isWithin = (dir, root) => dir === root || dir.startsWith(`${root}/`);

export function installDirProblem(raw) {
  // Checked as sent: values() trims it, and the API accepts a pasted path with spaces around it.
  const value = raw.trim();
  if (value === '') return undefined;
  if (value.length > 255) return 'must be at most 255 characters';
  if (!value.startsWith('/')) return 'must be an absolute path (start with /)';
  if (!/^[A-Za-z0-9._/-]+$/.test(value)) return "may contain only letters, digits, '.', '_', '-' and '/'";
  const dir = value.replace(/\/+$/, '') || '/';
  const segments = dir === '/' ? [] : dir.split('/').slice(1);
  if (segments.some((s) => s === '')) return "must not contain empty path segments ('//')";
  if (segments.some((s) => s === '.' || s === '..')) return "must not contain '.' or '..' segments";
  if (segments.length < 2) return 'must be at least two levels deep (e.g. /data/zenova-node)';
  if (isWithin(dir, CENTRAL_INSTALL_DIR) || isWithin(CENTRAL_INSTALL_DIR, dir)) {
    return `must not be inside or overlap the central install ${CENTRAL_INSTALL_DIR}`;
  }
  const root = FORBIDDEN_INSTALL_ROOTS.find((r) => isWithin(dir, r));
  if (root === undefined) return undefined;
  const reason = FORBIDDEN_ROOT_REASONS[root];
  return `must not be under ${root}${reason === undefined ? '' : ` (${reason})`}`;
}

const IPV4 = /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]\d|\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]\d|\d)$/;

function isIpv6(text) {
  if (!/^[0-9a-f:.]+$/.test(text) || !text.includes(':')) return false;
  try {
    new URL(`http://[${text}]/`);
    return true;
  } catch {
    return false;
  }
}

const isPort = (text) => /^\d{1,5}$/.test(text) && Number(text) >= 1 && Number(text) <= 65535;

function isDnsName(host) {
  const labels = host.split('.');
  return host.length <= 253 && labels.every((l) => /^(?!-)[a-z0-9-]{1,63}(?<!-)$/.test(l)) && !/^\d+$/.test(labels[labels.length - 1]);
}

export function addressProblem(value) {
  const rule = 'must be a DNS name or IP address, optionally with :port (at most 255 characters)';
  if (value === '') return 'is required';
  const address = value.toLowerCase();
  if (address.length > 255) return rule;
  // An IPv6 zone (%eth0) is left to the API.
  if (IPV4.test(address) || isIpv6(address) || /^[0-9a-f:.]+%/.test(address)) return undefined;
  const bracketed = /^\[([0-9a-f:.]+)\](?::(\d+))?$/.exec(address);
  if (bracketed) return isIpv6(bracketed[1]) && (bracketed[2] === undefined || isPort(bracketed[2])) ? undefined : rule;
  const [host, port, ...rest] = address.split(':');
  if (rest.length > 0 || (port !== undefined && !isPort(port))) return rule;
  return IPV4.test(host) || isDnsName(host) ? undefined : rule;
}

export function controlPlaneUrlProblem(value) {
  if (value === '') return 'is required';
  if (value.length > 2048) return 'must be at most 2048 characters';
  if (!value.startsWith('https://')) return 'must start with https://';
  if (/[\p{Cc}\s]/u.test(value)) return 'must not contain spaces or control characters';
  if (value.includes('\\')) return 'must not contain a backslash (use /)';
  let url;
  try {
    url = new URL(value);
  } catch {
    return 'must be a valid URL';
  }
  if (!url.hostname || !/^https:\/\/[^/]/.test(value)) return 'must name a host right after the scheme (scheme://host)';
  const authority = value.slice('https://'.length).split(/[/?#]/, 1)[0];
  if (url.username || url.password || authority.includes('@')) return "must not contain '@' before the host (it starts a user name)";
  if (!hostAsWritten(authority, url.hostname)) {
    return 'must write the host as it is read (an IPv4 address as four plain decimal numbers; a name without %-escapes, full-width or invisible characters)';
  }
  if (url.port === '0') return 'must not use port 0 (no server listens there)';
  if (value.includes('?') || value.includes('#')) return 'must not contain a query or fragment';
  if (!/^[A-Za-z0-9._~:/[\]%-]+$/.test(value)) return 'may contain only letters, digits and . _ ~ : / [ ] % -';
  // The API's last two rules (node-validation.ts), so the wizard never gets to its last step with
  // a URL the create call refuses: the console page's address, and a path nodes would resolve.
  if (/\/console\/*$/i.test(resolvedPath(url))) return 'is the console page\'s address (ends in /console): give the control plane\'s callback URL without it';
  return dotSegmentProblem(value);
}

/**
 * Whether the host as written is the host the URL parser read (`0x7f.1`, `127.1` and `%63p` are
 * not), up to letter case and IPv6 spelling. Only for ASCII hosts: any other character is refused
 * by the character rule after it.
 */
function hostAsWritten(authority, hostname) {
  const host = authority.startsWith('[') ? authority.slice(0, authority.indexOf(']') + 1) : authority.split(':', 1)[0];
  if (host.startsWith('[')) return hostname.startsWith('[');
  return !/^[\x21-\x7e]*$/.test(host) || host.toLowerCase() === hostname;
}

/** The URL's path as nodes request it: dot segments resolved, unreserved characters' %XX escapes decoded. */
function resolvedPath(url) {
  return url.pathname.replace(/%([0-9A-Fa-f]{2})/g, (escape, hex) => {
    const char = String.fromCharCode(parseInt(hex, 16));
    return /^[A-Za-z0-9._~-]$/.test(char) ? char : escape;
  });
}

/** A `.` or `..` path segment, also written with `%2e`: the URL parser resolves it away, so nodes would call another path. */
function dotSegmentProblem(value) {
  const afterScheme = value.slice(value.indexOf('://') + 3);
  const slash = afterScheme.search(/[/?#]/);
  if (slash === -1 || afterScheme[slash] !== '/') return undefined;
  const path = afterScheme.slice(slash).split(/[?#]/, 1)[0];
  for (const segment of path.split('/')) {
    const dots = segment.replace(/%2e/gi, '.');
    if (dots === '.' || dots === '..') {
      const readAs = segment === dots ? '' : `read as '${dots}'; `;
      return `must not contain the path segment '${segment}' (${readAs}the URL parser resolves it away, so nodes would call another path); write the path without '.' or '..' segments`;
    }
  }
  return undefined;
}

const PEM_BLOCK = /-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----/g;

/** The PEM's shape; whether each block parses as X.509 only the API can tell. */
export function caPemProblem(value) {
  if (value.trim() === '') return undefined;
  if (value.length > MAX_CA_PEM_CHARS) return `must be at most ${MAX_CA_PEM_CHARS} characters`;
  const blocks = value.match(PEM_BLOCK) ?? [];
  if (blocks.length === 0) return 'must be one or more PEM certificates (-----BEGIN CERTIFICATE-----)';
  if (value.replace(PEM_BLOCK, '').trim() !== '') return 'must contain only PEM certificates (found other text around them)';
  if (blocks.length > MAX_CA_CERTIFICATES) return `must hold at most ${MAX_CA_CERTIFICATES} certificates`;
  return undefined;
}

export function integerProblem(value, range) {
  const rule = `must be an integer from ${range.min} to ${range.max}`;
  if (!/^\d+$/.test(value.trim())) return rule;
  const n = Number(value.trim());
  return n < range.min || n > range.max ? rule : undefined;
}

/**
 * The API's 400 message as `field → rule` ("installDir: must not be under /tmp; surfaces: …"), so
 * each part can be shown at its field; parts naming no known field stay in the banner only.
 */
export function fieldProblems(message) {
  const problems = new Map();
  for (const part of String(message).split('; ')) {
    const match = /^([A-Za-z]+)(?:[.[][^:]*)?: (.*)$/s.exec(part);
    if (match && !problems.has(match[1])) problems.set(match[1], match[2]);
  }
  return problems;
}

// ---- small DOM helpers (dom.js's h() takes a fixed set of attributes; the rest are properties) ----

function props(el, values) {
  Object.assign(el, values);
  return el;
}

/** Hides or shows: the attribute, and console.css's .hidden for elements whose class sets a display. */
export function setHidden(el, hidden) {
  el.hidden = hidden;
  el.classList.toggle('hidden', hidden);
}

/** A labelled control with its hint and its inline error, wired with aria-describedby. */
export function field(h, { id, label, control, hint }) {
  const error = h('p', { class: 'field-error', id: `${id}-error`, role: 'alert' });
  setHidden(error, true);
  const hintEl = hint ? h('p', { class: 'hint', id: `${id}-hint` }, hint) : null;
  control.setAttribute('aria-describedby', [hintEl ? `${id}-hint` : '', `${id}-error`].filter(Boolean).join(' '));
  const wrapper = h('div', { class: 'field' }, h('label', { for: id }, label), control, hintEl, error);
  return {
    wrapper,
    control,
    setProblem(problem) {
      error.textContent = problem ?? '';
      setHidden(error, !problem);
      if (problem) control.setAttribute('aria-invalid', 'true');
      else control.removeAttribute('aria-invalid');
      control.classList.toggle('invalid', Boolean(problem));
    },
  };
}

// ---- the one-time command (seed 004 §9.3: shown once, treat the token as a credential) ----

const COMMAND_TITLES = { install: 'Install command', reenroll: 'Re-enroll command', upgrade: 'Upgrade command' };
const COMMAND_PURPOSES = {
  install: `Run it as root on the node host, in the directory that holds ${NODE_PACKAGE_FILE}. Copy it whole; do not edit it.`,
  reenroll: `Run it as root on the node host, in the directory that holds ${NODE_PACKAGE_FILE}, to give the node a new identity `
    + '(its old credentials stop working). To replace a lost host with a new one, run it there without --reenroll.',
  upgrade: `Run it as root on the node host with the new installer, in the directory that holds the new ${NODE_PACKAGE_FILE}. `
    + 'It keeps the node\'s identity, spool and install directory.',
};

async function copyText(text, source) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // Denied (no permission, page not focused): fall back to the selection below.
    }
  }
  const range = document.createRange();
  range.selectNodeContents(source);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
  try {
    return document.execCommand('copy');
  } catch {
    return false;
  }
}

/**
 * The pre-check of seed 004 §9.4, shown before the command: the API's `checkCommand`, the same
 * installer run with --check-only and no token, safe to run any number of times.
 */
function checkCommandParts(h, { nodeName, kind, checkCommand }) {
  const checkBox = h('pre', { class: 'command-box', 'data-testid': 'check-command', 'aria-label': `Pre-check command for node ${nodeName}` }, checkCommand);
  const checkCopyStatus = h('span', { class: 'copy-status', role: 'status', 'aria-live': 'polite' });
  const checkCopyButton = h('button', {
    type: 'button',
    class: 'btn',
    onclick: async () => {
      const ok = await copyText(checkCommand, checkBox);
      checkCopyStatus.textContent = ok ? 'Pre-check copied to the clipboard: it holds no secret.' : 'Copy failed: select the pre-check and copy it by hand.';
    },
  }, 'Copy pre-check');
  return [
    h('h3', {}, 'First: the pre-check (spends no token)'),
    h('p', { 'data-testid': 'check-command-hint' },
      `Run this first, as root on the node host in the directory that holds ${NODE_PACKAGE_FILE}`
      + (checkCommand.includes('--ca-file') ? ` and ${CA_FILE_NAME} (below)` : '')
      + ': it runs the host checks and reaches the control plane with the same settings as the '
      + `${COMMAND_TITLES[kind].toLowerCase()}, uses no token and writes nothing, so it can be run any number of times. `
      + `If it reports a blocking finding, fix that and run it again; do not run the ${COMMAND_TITLES[kind].toLowerCase()} until it passes.`),
    checkBox,
    h('div', { class: 'row' }, checkCopyButton, checkCopyStatus),
  ];
}

/**
 * The command as the API issued it, shown once: the warnings, the command with a copy button, and
 * the CA file the command's --ca-file names (as a download) when the node has a CA. Returns the
 * element and a cleanup that frees the download's object URL.
 */
export function oneTimeCommandView(h, { nodeName, issued, reissued = false, enrolledHost }) {
  const kind = issued.kind;
  const commandBox = h('pre', { class: 'command-box', 'data-testid': 'install-command', 'aria-label': `${COMMAND_TITLES[kind]} for node ${nodeName}` }, issued.command);
  const copyStatus = h('span', { class: 'copy-status', role: 'status', 'aria-live': 'polite' });
  const copyButton = h('button', {
    type: 'button',
    class: 'btn btn-primary',
    onclick: async () => {
      const ok = await copyText(issued.command, commandBox);
      copyStatus.textContent = ok ? 'Copied. Keep it somewhere only you can read.' : 'Copy failed: select the command and copy it by hand.';
    },
  }, 'Copy command');

  const expires = new Date(issued.expiresAt);
  const checkParts = issued.checkCommand ? checkCommandParts(h, { nodeName, kind, checkCommand: issued.checkCommand }) : [];
  const parts = [
    h('h2', {}, `${COMMAND_TITLES[kind]} for node ${nodeName}`),
    h('div', { class: 'banner banner-warning', role: 'note', 'data-testid': 'command-warning' },
      h('p', {}, h('strong', {}, 'This command is shown only once. '),
        'Copy it now and keep it in a controlled place: once you leave this page it cannot be shown again '
        + `(issue a new one from the node's details if it is lost, used or expired).`),
      h('p', {}, 'Its one-time token is as good as the node\'s access credential: do not send it over chat, e-mail or tickets in plain text, '
        + 'and do not share screenshots of it.'),
      reissued ? h('p', {}, `Any earlier unused ${COMMAND_TITLES[kind].toLowerCase()} of node ${nodeName} no longer works.`) : null,
      enrolledHost && kind === 'install'
        ? h('p', {}, `Node ${nodeName} is enrolled (host ${enrolledHost}). Redeeming this install command gives the installing host `
          + `the node's identity and revokes the credentials of ${enrolledHost}. For ${enrolledHost} itself (identity lost or credential expired) `
          + 'use the re-enroll command instead.')
        : null),
    ...checkParts,
    checkParts.length > 0 ? h('h3', {}, `Then: the ${COMMAND_TITLES[kind].toLowerCase()} (spends the token)`) : null,
    h('p', {}, `The token is valid until ${expires.toISOString()}. ${COMMAND_PURPOSES[kind]}`),
    commandBox,
    h('div', { class: 'row' }, copyButton, copyStatus),
    h('p', { class: 'hint', 'data-testid': 'command-token-hint' },
      'The command pipes the token to the installer (printf \'%s\\n\' <token> | … --token-file -): printf is the shell\'s own, '
      + 'so the token does not show in the process list. To keep it out of the shell history too, write the token to a file only root '
      + 'can read, drop "printf … |" and replace "--token-file -" with "--token-file <file>"; delete the file after the install.'),
  ];

  let objectUrl;
  if (issued.caPem) {
    objectUrl = URL.createObjectURL(new Blob([issued.caPem], { type: 'application/x-pem-file' }));
    const download = props(h('a', { href: objectUrl, class: 'btn', 'data-testid': 'ca-download' }, `Download ${CA_FILE_NAME}`), { download: CA_FILE_NAME });
    parts.push(
      h('h3', {}, 'Control-plane CA'),
      h('p', {}, `The command's --ca-file is ${CA_FILE_NAME}: save the node's control-plane CA under that name on the node host, `
        + `next to ${NODE_PACKAGE_FILE}.`),
      h('div', { class: 'row' }, download),
      h('details', {}, h('summary', {}, 'Show the CA'), h('pre', { class: 'command-box', 'aria-label': 'Control-plane CA' }, issued.caPem)),
    );
  }
  const view = h('section', { class: 'card stack', 'aria-label': COMMAND_TITLES[kind] }, ...parts);
  return {
    view,
    cleanup() {
      if (objectUrl) URL.revokeObjectURL(objectUrl);
    },
  };
}

// ---- onboarding progress (seed 004 §9.5) ----

export const ONBOARDING_STAGES = [
  {
    stage: 'registered',
    title: 'Registered',
    meaning: 'The token was redeemed and the node identity created.',
    stuck: 'Did the install command finish? Read the reason it printed; when the token expired or was used, reissue the install command from the node details.',
  },
  {
    stage: 'first-heartbeat',
    title: 'First heartbeat',
    meaning: 'The node service started and connected to the control plane.',
    stuck: 'Can the node host reach the control-plane URL (curl -v <url>)? With a self-signed or internal control-plane certificate, was its CA given? '
      + "Check the node-edge log: sudo zenova logs node-edge --since '30 min ago'.",
  },
  {
    stage: 'config-synced',
    title: 'Config synced',
    meaning: 'The node loaded the config from the control plane and can serve requests.',
    stuck: "Is the node's version the control plane's? Check the node-edge log.",
  },
];

/** The three steps for a node at `stage` (null: not enrolled yet). */
export function onboardingSteps(h, stage) {
  const reached = ONBOARDING_STAGES.findIndex((s) => s.stage === stage);
  return h('ol', { class: 'progress', 'aria-label': 'Onboarding progress' },
    ...ONBOARDING_STAGES.map((s, i) => {
      const state = i <= reached ? 'done' : i === reached + 1 ? 'current' : 'waiting';
      const item = h('li', { class: state === 'waiting' ? '' : state, 'data-testid': `onboarding-${s.stage}`, 'data-state': state },
        h('div', {},
          h('strong', {}, s.title),
          ` — ${state === 'done' ? 'done' : state === 'current' ? 'waiting for it' : 'not yet'}. `,
          h('span', { class: 'muted' }, s.meaning),
          state === 'current' ? h('p', { class: 'hint' }, `Stuck here? ${s.stuck}`) : null));
      if (state === 'current') item.setAttribute('aria-current', 'step');
      return item;
    }));
}

/**
 * Polls the node every 2 s and redraws its onboarding steps in `container` until it is config-synced.
 * `onNode` sees each answer. Returns stop().
 */
export function trackOnboarding(container, name, ctx, onNode) {
  const { h, api } = ctx;
  let stopped = false;
  let timer;
  const status = h('p', { class: 'muted', role: 'status', 'aria-live': 'polite' });
  const steps = h('div', {}, onboardingSteps(h, null));
  container.append(h('h2', {}, 'Onboarding progress'), steps, status);

  async function poll() {
    let stage;
    try {
      const node = await api('GET', nodePath(name));
      if (stopped) return;
      stage = node.onboardingStage;
      steps.replaceChildren(onboardingSteps(h, stage));
      status.textContent = stage === 'config-synced'
        ? `Node ${name} is online and serving with the control plane's config.`
        : stage === null
          ? 'Waiting for the node to enroll: run the install command on the node host. This updates by itself.'
          : 'Waiting for the next step. This updates by itself.';
      onNode?.(node);
    } catch (err) {
      if (stopped) return;
      status.textContent = `Could not read the node's progress: ${err?.message ?? err}`;
      if (err?.status === 401 || err?.status === 404) return;
    }
    if (!stopped && stage !== 'config-synced') timer = setTimeout(() => { void poll(); }, ONBOARDING_POLL_MS);
  }
  void poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

// ---- the wizard ----

const STEPS = ['Basic info', 'Network', 'Local spool', 'Replicas and review'];
/** Which step holds each API field, to open the step of a refused field. */
const FIELD_STEP = {
  name: 0, region: 0, surfaces: 0, installDir: 0,
  address: 1, controlPlaneUrl: 1, caPem: 1,
  spoolQuotaGb: 2, spoolFullPolicy: 2,
  replicas: 3,
};
export const POLICY_TEXT = {
  reject: 'Reject new requests (every request billable and auditable)',
  'metering-only': 'Drop request bodies, keep metering (service first; request bodies are no longer saved)',
};

/**
 * What the wizard held when the session ended under it, for the render right after the login:
 * `{ step, fields }` (what was typed; nothing in it is secret) or, once the node was created,
 * `{ createdName }` only, since the install command is shown once and never again from memory.
 * Kept in this module's memory, never in web storage: a reload or a closed tab forgets it.
 */
let sessionEndedDraft = null;

/**
 * The control-plane URL the wizard starts with, and the hint saying where it came from. Nodes
 * enroll over HTTPS only, so: the control plane's ZENOVA_PUBLIC_URL when it is https (behind a
 * reverse proxy this page's own address may not be the one node hosts reach), else this page's
 * origin when it was served over HTTPS, else nothing.
 */
function controlPlaneUrlDefault(publicUrl) {
  const rule = 'Starts with https://; the node host must be able to reach it.';
  if (typeof publicUrl === 'string' && publicUrl.startsWith('https://')) {
    return { value: publicUrl, hint: `${rule} Defaults to the control plane's public address (its ZENOVA_PUBLIC_URL setting).` };
  }
  const notHttps = typeof publicUrl === 'string' ? ` The control plane's ZENOVA_PUBLIC_URL (${publicUrl}) is not HTTPS, so it is not the default.` : '';
  if (location.protocol === 'https:') {
    return {
      value: location.origin,
      hint: `${rule} Defaults to this console's address${notHttps ? '.' : ' (setting ZENOVA_PUBLIC_URL on the control plane changes the default).'}${notHttps}`,
    };
  }
  return { value: '', hint: `${rule} (This console is served over plain HTTP, so enter the HTTPS address node hosts use.)${notHttps}` };
}

export function render(root, _params, ctx) {
  const { h, api, navigate } = ctx;
  const cleanups = [];
  let step = 0;
  let submitting = false;
  // Set once the node exists: from then on the page shows it, not the wizard.
  let createdName = null;
  // Set by the cleanup: the page was left (or the login view replaced it) while Create was in flight.
  let disposed = false;
  // Taken by this render whatever it is: a draft is offered back once, to the route it came from.
  const resume = ctx.resumed ? sessionEndedDraft : null;
  sessionEndedDraft = null;

  const input = (id, type = 'text', extra = {}) => props(h('input', { id, name: id, type }), extra);

  // Step 1: basic info.
  const name = field(h, {
    id: 'node-name', label: 'Node name',
    control: input('node-name', 'text', { autocomplete: 'off', spellcheck: false, maxLength: 64 }),
    hint: 'Lowercase letters, digits and hyphens, 2 to 31 characters, beginning and ending with a letter or digit. It cannot be changed later.',
  });
  const region = field(h, {
    id: 'node-region', label: 'Region (optional)',
    control: input('node-region', 'text', { autocomplete: 'off' }),
    hint: 'Helps you tell where the node is, e.g. "east" or "Shanghai office".',
  });
  const modelBox = h('input', { id: 'surface-model', type: 'checkbox', checked: true, disabled: true });
  modelBox.checked = true;
  const toolsBox = h('input', { id: 'surface-tools', type: 'checkbox' });
  const surfaces = h('fieldset', {},
    h('legend', {}, 'Surfaces'),
    h('div', { class: 'checks' },
      h('label', { class: 'check', for: 'surface-model' }, modelBox, 'Model gateway (required)'),
      h('label', { class: 'check', for: 'surface-tools' }, toolsBox, 'Tool gateway (MCP)')),
    h('p', { class: 'hint' }, 'What the node serves; it refuses requests for a surface that is not enabled.'));
  const surfacesError = h('p', { class: 'field-error', role: 'alert' });
  setHidden(surfacesError, true);
  surfaces.append(surfacesError);
  const method = field(h, {
    id: 'install-method', label: 'Install method',
    control: h('select', { id: 'install-method', name: 'install-method' }, h('option', { value: 'linux-systemd' }, 'Linux (systemd)')),
  });
  const installDir = field(h, {
    id: 'install-dir', label: 'Install directory (optional)',
    control: input('install-dir', 'text', { placeholder: DEFAULT_INSTALL_DIR, autocomplete: 'off', spellcheck: false }),
    hint: `Blank installs to ${DEFAULT_INSTALL_DIR}. An absolute path at least two levels deep, not under /tmp, /var/tmp, /home, /root, `
      + '/run/user, /usr, /etc or /boot, nor inside /opt/zenova. It cannot be changed by an upgrade later.',
  });

  // Step 2: network.
  const address = field(h, {
    id: 'node-address', label: 'Node address',
    control: input('node-address', 'text', { autocomplete: 'off', spellcheck: false, placeholder: 'edge-1.example.com' }),
    hint: 'The DNS name or IP callers use to reach this node, optionally with :port. The entry certificate must cover it.',
  });
  // A draft restored after a re-login (restoreFields below) overwrites this default.
  const cpUrlDefault = controlPlaneUrlDefault(ctx.publicUrl);
  const cpUrl = field(h, {
    id: 'control-plane-url', label: 'Control-plane URL (the node connects back to it)',
    control: input('control-plane-url', 'url', { value: cpUrlDefault.value, placeholder: 'https://zenova.example.com', spellcheck: false }),
    hint: cpUrlDefault.hint,
  });
  const caPem = field(h, {
    id: 'ca-pem', label: 'Control-plane CA (optional)',
    control: props(h('textarea', { id: 'ca-pem', name: 'ca-pem', placeholder: '-----BEGIN CERTIFICATE-----' }), { rows: 6, spellcheck: false }),
    hint: 'Paste the CA certificate (PEM) when the control plane uses a self-signed or internal CA; leave blank for a publicly trusted certificate.',
  });

  // Step 3: local spool.
  const quota = field(h, {
    id: 'spool-quota', label: 'Spool quota (GiB)',
    control: input('spool-quota', 'number', { value: String(SPOOL_QUOTA_GB.default), min: String(SPOOL_QUOTA_GB.min), max: String(SPOOL_QUOTA_GB.max), step: '1' }),
    hint: 'Disk space (GiB) for request records the node keeps while it cannot reach the control plane.',
  });
  const policyRadios = Object.entries(POLICY_TEXT).map(([value, text]) => {
    const radio = h('input', { id: `policy-${value}`, name: 'spool-full-policy', type: 'radio', value });
    radio.checked = value === 'reject';
    return { value, radio, row: h('label', { class: 'check', for: `policy-${value}` }, radio, text) };
  });
  const policy = h('fieldset', {}, h('legend', {}, 'When the spool is full'), h('div', { class: 'checks' }, ...policyRadios.map((p) => p.row)));

  // Step 4: replicas and review.
  const replicas = field(h, {
    id: 'replicas', label: 'Replicas',
    control: input('replicas', 'number', { value: String(REPLICAS.default), min: String(REPLICAS.min), max: String(REPLICAS.max), step: '1' }),
    hint: 'How many node-edge processes the node host runs (1 to 16). It cannot be changed after creation.',
  });
  const review = h('dl', { class: 'props', 'aria-label': 'Review' });

  const fields = { name, region, installDir, address, controlPlaneUrl: cpUrl, caPem, spoolQuotaGb: quota, replicas };
  const checks = {
    name: () => nameProblem(name.control.value),
    region: () => regionProblem(region.control.value),
    installDir: () => installDirProblem(installDir.control.value),
    address: () => addressProblem(address.control.value.trim()),
    controlPlaneUrl: () => controlPlaneUrlProblem(cpUrl.control.value.trim()),
    caPem: () => caPemProblem(caPem.control.value),
    spoolQuotaGb: () => integerProblem(quota.control.value, SPOOL_QUOTA_GB),
    replicas: () => integerProblem(replicas.control.value, REPLICAS),
  };
  // Instant feedback once a field is left; a field already marked is re-checked as it is typed.
  for (const [key, f] of Object.entries(fields)) {
    // An empty field is not "required" until Next: tabbing through it is no mistake.
    f.control.addEventListener('blur', () => { if (f.control.value !== '') f.setProblem(checks[key]()); });
    f.control.addEventListener('input', () => { if (f.control.hasAttribute('aria-invalid')) f.setProblem(checks[key]()); });
  }

  const panels = [
    [name.wrapper, region.wrapper, surfaces, method.wrapper, installDir.wrapper],
    [address.wrapper, cpUrl.wrapper, caPem.wrapper],
    [quota.wrapper, policy],
    [replicas.wrapper, h('h3', {}, 'Review'), review],
  ].map((children, i) => h('fieldset', { class: 'wizard-step', 'data-step': String(i + 1) }, h('legend', {}, `Step ${i + 1} of 4: ${STEPS[i]}`), ...children));

  const stepList = h('ol', { class: 'steps', 'aria-label': 'Steps' }, ...STEPS.map((s) => h('li', {}, s)));
  const backButton = h('button', { type: 'button', class: 'btn', onclick: () => go(step - 1) }, 'Back');
  const nextButton = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Next');
  const cancelButton = h('button', { type: 'button', class: 'btn btn-quiet', onclick: () => navigate('#/nodes') }, 'Cancel');
  const form = h('form', { class: 'dialog', 'aria-label': 'Add node', onsubmit: (event) => { event.preventDefault(); void submit(); } },
    stepList, ...panels, h('div', { class: 'toolbar' }, cancelButton, backButton, nextButton));
  props(form, { noValidate: true });

  const page = h('div', {}, h('div', { class: 'page-header' }, h('h1', {}, 'Add node')), form);
  root.append(page);

  /** The controls as typed (not trimmed or parsed): what a re-login puts back. */
  function typedFields() {
    return {
      name: name.control.value,
      region: region.control.value,
      tools: toolsBox.checked,
      installDir: installDir.control.value,
      address: address.control.value,
      controlPlaneUrl: cpUrl.control.value,
      caPem: caPem.control.value,
      spoolQuotaGb: quota.control.value,
      spoolFullPolicy: policyRadios.find((p) => p.radio.checked)?.value ?? 'reject',
      replicas: replicas.control.value,
    };
  }

  function restoreFields(typed) {
    const controls = {
      name: name.control, region: region.control, installDir: installDir.control, address: address.control,
      controlPlaneUrl: cpUrl.control, caPem: caPem.control, spoolQuotaGb: quota.control, replicas: replicas.control,
    };
    for (const [key, control] of Object.entries(controls)) {
      if (typeof typed[key] === 'string') control.value = typed[key];
    }
    toolsBox.checked = typed.tools === true;
    for (const p of policyRadios) p.radio.checked = p.value === typed.spoolFullPolicy;
    if (!policyRadios.some((p) => p.radio.checked)) policyRadios[0].radio.checked = true;
  }

  function values() {
    return {
      name: name.control.value,
      region: region.control.value.trim(),
      surfaces: toolsBox.checked ? ['model', 'tools'] : ['model'],
      installDir: installDir.control.value.trim(),
      address: address.control.value.trim(),
      controlPlaneUrl: cpUrl.control.value.trim(),
      caPem: caPem.control.value,
      spoolQuotaGb: Number(quota.control.value.trim()),
      spoolFullPolicy: policyRadios.find((p) => p.radio.checked)?.value ?? 'reject',
      replicas: Number(replicas.control.value.trim()),
    };
  }

  function fillReview() {
    const v = values();
    const rows = [
      ['Node name', v.name],
      ['Region', v.region || '-'],
      ['Surfaces', v.surfaces.join(', ')],
      ['Install method', 'Linux (systemd)'],
      ['Install directory', v.installDir || `${DEFAULT_INSTALL_DIR} (default)`],
      ['Node address', v.address],
      ['Control-plane URL', v.controlPlaneUrl],
      ['Control-plane CA', v.caPem.trim() ? 'given' : 'none (publicly trusted certificate)'],
      ['Spool quota', `${v.spoolQuotaGb} GiB`],
      ['When the spool is full', POLICY_TEXT[v.spoolFullPolicy]],
    ];
    review.replaceChildren(...rows.flatMap(([k, val]) => [h('dt', {}, k), h('dd', {}, val)]));
  }

  function go(target) {
    step = Math.max(0, Math.min(STEPS.length - 1, target));
    panels.forEach((panel, i) => { setHidden(panel, i !== step); });
    [...stepList.children].forEach((li, i) => {
      li.className = i < step ? 'done' : i === step ? 'current' : '';
      if (i === step) li.setAttribute('aria-current', 'step');
      else li.removeAttribute('aria-current');
    });
    setHidden(backButton, step === 0);
    nextButton.textContent = step === STEPS.length - 1 ? 'Create and generate install command' : 'Next';
    if (step === STEPS.length - 1) fillReview();
  }

  /** Checks the fields of `steps`; marks each and returns the first step with a problem, or -1. */
  function check(steps) {
    let first = -1;
    for (const [key, f] of Object.entries(fields)) {
      if (!steps.includes(FIELD_STEP[key])) continue;
      const problem = checks[key]();
      f.setProblem(problem);
      if (problem && (first === -1 || FIELD_STEP[key] < first)) first = FIELD_STEP[key];
    }
    return first;
  }

  function focusFirstInvalid() {
    const invalid = panels[step].querySelector('[aria-invalid="true"]');
    invalid?.focus();
  }

  async function submit() {
    if (submitting) return;
    if (step < STEPS.length - 1) {
      if (check([step]) === -1) {
        go(step + 1);
        panels[step].querySelector('input:not([disabled]), textarea, select')?.focus();
      } else {
        focusFirstInvalid();
      }
      return;
    }
    const bad = check([0, 1, 2, 3]);
    if (bad !== -1) {
      go(bad);
      focusFirstInvalid();
      return;
    }
    const v = values();
    const body = {
      name: v.name,
      surfaces: v.surfaces,
      address: v.address,
      controlPlaneUrl: v.controlPlaneUrl,
      spoolQuotaGb: v.spoolQuotaGb,
      spoolFullPolicy: v.spoolFullPolicy,
      replicas: v.replicas,
      ...(v.region ? { region: v.region } : {}),
      ...(v.installDir ? { installDir: v.installDir } : {}),
      ...(v.caPem.trim() ? { caPem: v.caPem } : {}),
    };
    submitting = true;
    nextButton.disabled = true;
    nextButton.textContent = 'Creating…';
    try {
      const created = await api('POST', '/api/v1/nodes', body);
      if (disposed) {
        createdAfterLeaving(created);
        return;
      }
      hideError(root);
      showCreated(created);
    } catch (err) {
      if (disposed) {
        failedAfterLeaving(v.name, err);
        return;
      }
      submitting = false;
      nextButton.disabled = false;
      go(step);
      // Given up on, a create may still have been done: the list tells, and a retry would say the name is taken.
      showError(root, page, h, err?.code === 'TIMEOUT'
        ? new Error(`${TIMEOUT_MESSAGE} Node ${v.name} may have been created anyway: look for it in the node list `
          + 'and, if it is there, reissue its install command from its details.')
        : err);
      // Mark each refused field and open the first one's step; the banner keeps the whole message.
      const problems = err?.status === 400 || err?.status === 409 ? fieldProblems(err.message) : new Map();
      let first = -1;
      for (const [key, problem] of problems) {
        if (fields[key]) fields[key].setProblem(problem);
        if (key === 'surfaces') {
          surfacesError.textContent = problem;
          setHidden(surfacesError, false);
        }
        if (FIELD_STEP[key] !== undefined && (first === -1 || FIELD_STEP[key] < first)) first = FIELD_STEP[key];
      }
      if (first !== -1) go(first);
    }
  }

  /**
   * The created node: its one-time command (`install`) and the onboarding progress. Without
   * `install` (back after a re-login), only a note that the command is not shown again.
   */
  function showCreated({ node, install }) {
    createdName = node.name;
    const command = install ? oneTimeCommandView(h, { nodeName: node.name, issued: install }) : null;
    if (command) cleanups.push(command.cleanup);
    const progress = h('section', { class: 'card', 'aria-label': 'Onboarding progress' });
    const detailLink = h('a', { class: 'btn', href: `#/nodes/${encodeURIComponent(node.name)}` }, `Open node ${node.name}`);
    page.replaceChildren(
      h('div', { class: 'page-header' }, h('h1', {}, `Node ${node.name} created`)),
      command
        ? h('p', {}, 'Next: put the installer and the node package on the node host, run the pre-check, then run this command there '
          + `(the package renamed to ${NODE_PACKAGE_FILE}, in the same directory).`)
        : h('div', { class: 'banner banner-info', role: 'note', 'data-testid': 'command-not-shown-again' },
          `The install command of node ${node.name} was shown only once and is not shown again. If it was not copied, `
          + `or it is lost, used or expired, open node ${node.name} and reissue the install command there.`),
      ...(command ? [command.view] : []),
      progress,
      h('div', { class: 'toolbar' }, detailLink, h('a', { class: 'btn btn-quiet', href: '#/nodes' }, 'Back to nodes')),
    );
    cleanups.push(trackOnboarding(progress, node.name, ctx));
    (command ? command.view.querySelector('button') : detailLink)?.focus();
  }

  /**
   * Create answered after the page was left: the node exists and its one-time command was never
   * shown. Shown on whatever page the user is on now (a notice of the shell, until dismissed), not
   * the wizard's progress: nothing polls for a page that is gone.
   */
  function createdAfterLeaving({ node, install }) {
    const command = oneTimeCommandView(h, { nodeName: node.name, issued: install });
    const shown = ctx.notify?.({
      testid: 'node-created-notice',
      content: [
        h('p', {}, h('strong', {}, `Node ${node.name} was created after you left Add node. `),
          'Its install command is below, shown only this once: copy it before you dismiss this notice. ',
          'Follow its onboarding on ', h('a', { href: `#/nodes/${encodeURIComponent(node.name)}` }, `node ${node.name}'s page`),
          ', where the install command can also be reissued.'),
        command.view,
      ],
      onDismiss: command.cleanup,
    });
    if (!shown) command.cleanup();
  }

  function failedAfterLeaving(nodeName, err) {
    // Signed out: the login view says so, and the wizard comes back with what was typed.
    if (err?.status === 401) return;
    const message = err instanceof Error ? err.message : String(err);
    const content = err?.code === 'TIMEOUT'
      ? h('p', {}, h('strong', {}, `Creating node ${nodeName} was given up. `), message,
        ` It may have been created anyway: look for it in the node list and, if it is there, reissue its install command from its details.`)
      : h('p', {}, h('strong', {}, `Node ${nodeName} was not created. `), message);
    ctx.notify?.({ testid: 'node-create-failed-notice', content: [content] });
  }

  if (resume?.createdName) {
    showCreated({ node: { name: resume.createdName }, install: null });
  } else {
    if (resume?.fields) restoreFields(resume.fields);
    go(resume?.step ?? 0);
    (step === 0 ? name.control : panels[step].querySelector('input:not([disabled]), textarea, select'))?.focus();
  }
  return (reason) => {
    // Kept only when the login view replaces the page; leaving it for another page discards it.
    if (reason?.sessionEnded) sessionEndedDraft = createdName !== null ? { createdName } : { step, fields: typedFields() };
    disposed = true;
    for (const fn of cleanups) fn();
  };
}
