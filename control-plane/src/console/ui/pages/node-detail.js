// Gateway › Nodes › <name>: every field of the node view (seed 004 §9.5), its onboarding progress,
// and the actions of §9.5–9.6: reissue the install command, re-enroll and upgrade commands (each
// shown once), edit network/CA, edit settings, delete (typed-name confirmation). Refreshed in place:
// every 2 s while the node is onboarding, every 5 s after, and not at all while an edit form is
// open. An edit form works on the node as it was when the form opened (its view and ETag): it sends
// only the fields changed in the form, with `If-Match`, so a change someone else made meanwhile is
// never written over (412: the form says so and offers the current values).
import {
  DEFAULT_INSTALL_DIR, POLICY_TEXT, SPOOL_QUOTA_GB, addressProblem, caPemProblem, controlPlaneUrlProblem,
  field, fieldProblems, integerProblem, oneTimeCommandView, onboardingSteps, setHidden,
} from './add-node.js';
import {
  MISSING, formatAge, formatBytes, formatCount, formatRate, formatSkew, hideError, nodePath, oneLine, showError,
  serverTimeOfDay, skewNeedsSync, staleMessage, statusBadge,
} from './nodes-list.js';
import { apiResponse, serverNow } from '../api.js';

const ONBOARDING_REFRESH_MS = 2_000;
const REFRESH_MS = 5_000;
const PRECONDITION_FAILED = 'ZN_ERR_CP_PRECONDITION_FAILED';

/** Node.js names the CPU (x64); operators know the package's name (x86_64). */
const PACKAGE_ARCH = { x64: 'x86_64', arm64: 'aarch64' };
const SURFACE_TEXT = { model: 'Model gateway', tools: 'Tool gateway (MCP)' };
// The buttons' names are the ones advice elsewhere points at (`node detail › Issue upgrade command`): a test keeps them in step.
export const COMMANDS = [
  {
    kind: 'install', button: 'Reissue install command',
    about: 'For a node not installed yet, or whose install command expired, was lost or was used on a host that failed. The previous unused install command stops working.',
  },
  {
    kind: 'reenroll', button: 'Issue reenroll command',
    about: 'For a node host that lost its identity or whose credential expired, or to replace a lost host. Redeeming it revokes the node\'s old credentials.',
  },
  {
    kind: 'upgrade', button: 'Issue upgrade command',
    about: 'For a node that was offline or failed while the control plane upgraded its nodes. It keeps the node\'s identity, data and install directory.',
  },
];

function withAge(iso) {
  return iso ? `${iso} (${formatAge(iso)})` : 'never';
}

function detailRows(node) {
  const protocol = node.protocolVersion == null ? '' : ` (protocol ${node.protocolVersion})`;
  const host = node.hostname ? `${node.hostname}${node.arch ? ` (${PACKAGE_ARCH[node.arch] ?? node.arch})` : ''}` : MISSING;
  const skew = typeof node.clockSkewMs !== 'number'
    ? 'not measured yet'
    : `${formatSkew(node.clockSkewMs)}${skewNeedsSync(node) ? ' (beyond ±30 s: sync the node host\'s clock)' : ''}`;
  const configError = node.configError
    ? `${oneLine(node.configError.code)} for version ${node.configError.version}, ${withAge(node.configError.at)}: ${oneLine(node.configError.message)}`
    : 'none';
  return [
    ['id', 'ID', node.id],
    ['region', 'Region', node.region || MISSING],
    ['surfaces', 'Surfaces', node.surfaces.map((s) => SURFACE_TEXT[s] ?? s).join(', ')],
    ['address', 'Node address', node.address],
    ['controlPlaneUrl', 'Control-plane URL', node.controlPlaneUrl],
    ['hasCa', 'Control-plane CA', node.hasCa ? 'own CA (given to the node with its commands)' : 'none: the node uses its system trust store'],
    ['installDir', 'Install directory', node.installDir ?? `${DEFAULT_INSTALL_DIR} (default)`],
    ['spool', 'Local spool', `quota ${node.spoolQuotaGb} GiB; when full: ${POLICY_TEXT[node.spoolFullPolicy] ?? node.spoolFullPolicy}`],
    ['replicas', 'Replicas', String(node.replicas)],
    ['version', 'Version', `${node.version ?? MISSING}${protocol}`],
    ['host', 'Host', host],
    ['enrolledAt', 'Enrolled', node.enrolledAt ?? 'not yet'],
    ['lastHeartbeatAt', 'Last heartbeat', withAge(node.lastHeartbeatAt)],
    ['clockSkewMs', 'Clock skew', skew],
    ['appliedConfigVersion', 'Config applied', node.appliedConfigVersion == null ? 'none yet' : `version ${node.appliedConfigVersion}`],
    ['configVersionsBehind', 'Config versions behind', formatCount(node.configVersionsBehind)],
    ['configError', 'Config error', configError],
    ['requests5m', 'Requests (5 min)', formatCount(node.requests5m)],
    ['errorRate5m', 'Error rate (5 min)', formatRate(node.errorRate5m)],
    ['backfillBacklog', 'Backfill backlog', formatCount(node.backfillBacklog)],
    ['spoolBytes', 'Local spool in use', formatBytes(node.spoolBytes)],
    ['createdAt', 'Created', node.createdAt],
  ];
}

function props(el, values) {
  Object.assign(el, values);
  return el;
}

export function render(root, params, ctx) {
  const { h, api, navigate } = ctx;
  const name = params.name;
  let node;
  /** The ETag of `node` (null: the answer had none). */
  let nodeEtag = null;
  /** The edit forms open now: while there is one, the page is not refreshed (nothing redrawn under it). */
  const openForms = new Set();
  let stopped = false;
  let timer;
  let refreshBanner;
  let commandCleanup;
  /** The control plane's time of the last node view shown. */
  let answeredAt = null;

  const badgeSlot = h('span', {});
  const header = h('div', { class: 'page-header' },
    h('h1', {}, `Node ${name} `, badgeSlot),
    h('a', { class: 'btn btn-quiet', href: '#/nodes' }, '← All nodes'));
  const body = h('div', {}, h('p', { class: 'muted', role: 'status' }, 'Loading…'));
  root.append(header, body);
  if (nodePath(name) === null) {
    // Not a name a node can have, and not one a browser can ask for (see nodePath).
    body.replaceChildren();
    showError(root, body, h, new Error(`No node named '${name}'.`));
    return undefined;
  }

  // ---- the parts a refresh redraws ----
  const configErrorBox = h('div', { class: 'banner banner-error', 'data-testid': 'config-error' });
  const fieldList = h('dl', { class: 'props', 'aria-label': 'Node fields' });
  const fieldsCard = h('section', { class: 'card', 'aria-label': 'Details' }, h('h2', {}, 'Details'), fieldList);
  const onboarding = h('section', { class: 'card', 'aria-label': 'Onboarding progress' });

  function show(view, etag) {
    node = view;
    nodeEtag = etag ?? null;
    answeredAt = serverNow();
    fieldList.classList.remove('stale');
    badgeSlot.replaceChildren(statusBadge(h, view.status));
    if (view.configError) {
      configErrorBox.replaceChildren(
        h('strong', {}, `Config version ${view.configError.version} was not applied: ${oneLine(view.configError.code)}`),
        h('p', {}, oneLine(view.configError.message)),
        h('p', {}, `Reported ${withAge(view.configError.at)}. The node keeps serving with its last good config; `
          + 'the next config it applies clears this.'));
      setHidden(configErrorBox, false);
    } else {
      setHidden(configErrorBox, true);
    }
    fieldList.replaceChildren(...detailRows(view).flatMap(([key, label, value]) => {
      const dd = h('dd', { 'data-field': key }, value);
      if (key === 'configError' && view.configError) dd.className = 'error-text';
      return [h('dt', {}, label), dd];
    }));
    onboarding.replaceChildren(h('h2', {}, 'Onboarding progress'), onboardingSteps(h, view.onboardingStage));
    if (view.onboardingStage === null) onboarding.append(h('p', { class: 'muted' }, 'Not enrolled yet: run the install command on the node host.'));
  }

  /** A refresh failed: the status and the heartbeat's age shown are no longer known to be true. */
  function markStale() {
    badgeSlot.replaceChildren(statusBadge(h, 'unknown'));
    fieldList.classList.add('stale');
    const heartbeat = fieldList.querySelector('[data-field="lastHeartbeatAt"]');
    if (heartbeat) {
      heartbeat.textContent = `${node.lastHeartbeatAt ?? 'never'} as of ${serverTimeOfDay(answeredAt)} `
        + '(age unknown: the control plane has not answered since)';
    }
  }

  // ---- commands ----
  const commandSlot = h('div', {});
  const commandButtons = COMMANDS.map(({ kind, button, about }) => {
    const btn = h('button', { type: 'button', class: 'btn', 'data-kind': kind, onclick: () => { void issue(kind, btn); } }, button);
    return h('div', { class: 'field' }, h('div', { class: 'row' }, btn), h('p', { class: 'hint' }, about));
  });
  const commands = h('section', { class: 'card', 'aria-label': 'Commands' }, h('h2', {}, 'Commands'),
    h('p', { class: 'muted' }, 'Each command carries a one-time token and is shown once.'), ...commandButtons, commandSlot);

  async function issue(kind, button) {
    button.disabled = true;
    try {
      const issued = await api('POST', nodePath(name, `/${kind}-command`), {});
      if (stopped) return;
      hideError(root);
      commandCleanup?.();
      const enrolledHost = node?.enrolledAt ? (node.hostname ?? 'its host') : undefined;
      const command = oneTimeCommandView(h, { nodeName: name, issued, reissued: true, enrolledHost });
      commandCleanup = command.cleanup;
      commandSlot.replaceChildren(command.view);
      command.view.scrollIntoView?.({ block: 'nearest' });
      // A new install or re-enrollment starts onboarding over: follow it closely.
      if (kind !== 'upgrade') schedule(ONBOARDING_REFRESH_MS);
    } catch (err) {
      if (!stopped) showError(root, commands, h, err);
    } finally {
      button.disabled = false;
    }
  }

  // ---- edit network / CA ----
  const network = h('section', { class: 'card', 'aria-label': 'Network' }, h('h2', {}, 'Network and control-plane CA'));
  const networkOpen = h('button', { type: 'button', class: 'btn', onclick: () => openNetwork() }, 'Edit network');
  network.append(h('p', { class: 'muted' }, 'Commands issued after an edit use the new values; commands issued before keep the values they were printed with.'), networkOpen);

  function openNetwork() {
    // The node as the form shows it: what is compared against and the ETag sent with the save.
    const base = node;
    const baseEtag = nodeEtag;
    const address = field(h, { id: 'edit-address', label: 'Node address', control: h('input', { id: 'edit-address', type: 'text', value: base.address }) });
    const url = field(h, {
      id: 'edit-cp-url', label: 'Control-plane URL',
      control: h('input', { id: 'edit-cp-url', type: 'text', value: base.controlPlaneUrl }),
      hint: 'Starts with https://; the node host must be able to reach it.',
    });
    address.control.value = base.address;
    url.control.value = base.controlPlaneUrl;
    const ca = field(h, {
      id: 'edit-ca', label: base.hasCa ? 'New control-plane CA (PEM)' : 'Control-plane CA (PEM, optional)',
      control: props(h('textarea', { id: 'edit-ca', placeholder: '-----BEGIN CERTIFICATE-----' }), { rows: 6, spellcheck: false }),
      hint: base.hasCa
        ? 'Leave blank to remove the CA: the node then checks the control plane against its system trust store.'
        : 'Paste it when the control plane uses a self-signed or internal CA; leave blank to keep none.',
    });
    const changeCa = h('input', { id: 'edit-ca-change', type: 'checkbox' });
    const hadCa = base.hasCa;
    if (hadCa) {
      setHidden(ca.wrapper, true);
      changeCa.addEventListener('change', () => { setHidden(ca.wrapper, !changeCa.checked); });
    }
    const save = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Save network');
    const form = h('form', {
      'aria-label': 'Edit network',
      onsubmit: (event) => {
        event.preventDefault();
        void saveNetwork();
      },
    },
    address.wrapper, url.wrapper,
    hadCa ? h('div', { class: 'field' }, h('label', { class: 'check', for: 'edit-ca-change' }, changeCa, 'Replace or remove the current CA (it is not shown here)')) : null,
    ca.wrapper,
    h('div', { class: 'toolbar' }, h('button', { type: 'button', class: 'btn btn-quiet', onclick: () => closeForm(form, networkOpen) }, 'Cancel'), save));
    props(form, { noValidate: true });
    setHidden(networkOpen, true);
    network.querySelector('.saved')?.remove();
    network.append(form);
    openForms.add(form);
    address.control.focus();

    async function saveNetwork() {
      const patch = {};
      const newAddress = address.control.value.trim();
      const newUrl = url.control.value.trim();
      if (newAddress !== base.address) patch.address = newAddress;
      if (newUrl !== base.controlPlaneUrl) patch.controlPlaneUrl = newUrl;
      const pem = ca.control.value;
      if (hadCa ? changeCa.checked : pem.trim() !== '') patch.caPem = pem.trim() === '' ? null : pem;
      const problems = {
        address: patch.address === undefined ? undefined : addressProblem(newAddress),
        controlPlaneUrl: patch.controlPlaneUrl === undefined ? undefined : controlPlaneUrlProblem(newUrl),
        caPem: typeof patch.caPem === 'string' ? caPemProblem(pem) : undefined,
      };
      address.setProblem(problems.address);
      url.setProblem(problems.controlPlaneUrl);
      ca.setProblem(problems.caPem);
      if (Object.values(problems).some(Boolean)) return;
      if (Object.keys(patch).length === 0) {
        showError(root, form, h, new Error('Nothing to save: change the address, the control-plane URL or the CA first.'));
        return;
      }
      save.disabled = true;
      try {
        const saved = await apiResponse('PATCH', nodePath(name, '/network'), patch, { ifMatch: baseEtag });
        if (stopped) return;
        hideError(root);
        show(saved.body, saved.etag);
        closeForm(form, networkOpen, { saved: true });
        network.append(h('p', { class: 'banner banner-success saved', role: 'status' },
          'Network saved. Commands issued from now on use these values'
          + (patch.caPem !== undefined ? '; reissue the install command if the node still has to be installed.' : '.')));
      } catch (err) {
        if (stopped) return;
        if (err?.code === PRECONDITION_FAILED) {
          changedMeanwhile(form, err, () => { closeForm(form, networkOpen, { saved: true }); openNetwork(); });
          return;
        }
        showError(root, form, h, err);
        const refused = fieldProblems(err?.message ?? '');
        if (refused.has('address')) address.setProblem(refused.get('address'));
        if (refused.has('controlPlaneUrl')) url.setProblem(refused.get('controlPlaneUrl'));
        if (refused.has('caPem')) ca.setProblem(refused.get('caPem'));
      } finally {
        save.disabled = false;
      }
    }
  }

  /**
   * Closes an edit form. With no other form open the refresh resumes: at once after a Cancel (the
   * page may be out of date by now), on its usual interval after a save (whose answer was shown).
   */
  function closeForm(form, opener, { saved = false } = {}) {
    form.remove();
    setHidden(opener, false);
    hideError(root);
    openForms.delete(form);
    if (openForms.size > 0 || stopped) return;
    if (saved) schedule(refreshInterval());
    else void refresh();
  }

  /**
   * A save refused with 412: the node changed since the form opened (someone else edited it).
   * Nothing was written. The API's message in the form, and a button that shows the node as it is
   * now and opens the form again with its current values (`reopen`), to redo the edit on them.
   */
  function changedMeanwhile(form, err, reopen) {
    const reload = h('button', {
      type: 'button', class: 'btn btn-small',
      onclick: async () => {
        reload.disabled = true;
        try {
          const current = await apiResponse('GET', nodePath(name));
          if (stopped) return;
          hideError(root);
          show(current.body, current.etag);
          reopen();
        } catch (loadErr) {
          if (stopped) return;
          reload.disabled = false;
          showError(root, form, h, loadErr);
        }
      },
    }, 'Reload the current values');
    const banner = showError(root, form, h, err);
    banner.append(h('div', { class: 'toolbar' }, reload));
  }

  // ---- edit settings ----
  const settings = h('section', { class: 'card', 'aria-label': 'Settings' }, h('h2', {}, 'Settings'));
  const settingsOpen = h('button', { type: 'button', class: 'btn', onclick: () => openSettings() }, 'Edit settings');
  settings.append(h('p', { class: 'muted' }, 'Surfaces and the local spool reach the node with its next config.'), settingsOpen);

  function openSettings() {
    // The node as the form shows it: what is compared against and the ETag sent with the save.
    const base = node;
    const baseEtag = nodeEtag;
    const model = h('input', { id: 'edit-surface-model', type: 'checkbox', checked: true, disabled: true });
    model.checked = true;
    const tools = h('input', { id: 'edit-surface-tools', type: 'checkbox' });
    tools.checked = base.surfaces.includes('tools');
    const quota = field(h, {
      id: 'edit-spool-quota', label: 'Spool quota (GiB)',
      control: props(h('input', { id: 'edit-spool-quota', type: 'number' }), { min: String(SPOOL_QUOTA_GB.min), max: String(SPOOL_QUOTA_GB.max), step: '1' }),
    });
    quota.control.value = String(base.spoolQuotaGb);
    const radios = Object.entries(POLICY_TEXT).map(([value, text]) => {
      const radio = h('input', { id: `edit-policy-${value}`, name: 'edit-spool-full-policy', type: 'radio', value });
      radio.checked = base.spoolFullPolicy === value;
      return { value, radio, row: h('label', { class: 'check', for: `edit-policy-${value}` }, radio, text) };
    });
    const save = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Save settings');
    const form = h('form', {
      'aria-label': 'Edit settings',
      onsubmit: (event) => {
        event.preventDefault();
        void saveSettings();
      },
    },
    h('fieldset', {}, h('legend', {}, 'Surfaces'), h('div', { class: 'checks' },
      h('label', { class: 'check', for: 'edit-surface-model' }, model, 'Model gateway (required)'),
      h('label', { class: 'check', for: 'edit-surface-tools' }, tools, 'Tool gateway (MCP)'))),
    quota.wrapper,
    h('fieldset', {}, h('legend', {}, 'When the spool is full'), h('div', { class: 'checks' }, ...radios.map((r) => r.row))),
    h('div', { class: 'toolbar' }, h('button', { type: 'button', class: 'btn btn-quiet', onclick: () => closeForm(form, settingsOpen) }, 'Cancel'), save));
    props(form, { noValidate: true });
    setHidden(settingsOpen, true);
    settings.querySelector('.saved')?.remove();
    settings.append(form);
    openForms.add(form);

    async function saveSettings() {
      const problem = integerProblem(quota.control.value, SPOOL_QUOTA_GB);
      quota.setProblem(problem);
      if (problem) return;
      // Only what was changed in the form: a field left as it was is not sent back, so a change
      // made to it meanwhile elsewhere is not undone.
      const patch = {};
      if (tools.checked !== base.surfaces.includes('tools')) patch.surfaces = tools.checked ? ['model', 'tools'] : ['model'];
      const spoolQuotaGb = Number(quota.control.value.trim());
      if (spoolQuotaGb !== base.spoolQuotaGb) patch.spoolQuotaGb = spoolQuotaGb;
      const spoolFullPolicy = radios.find((r) => r.radio.checked)?.value ?? base.spoolFullPolicy;
      if (spoolFullPolicy !== base.spoolFullPolicy) patch.spoolFullPolicy = spoolFullPolicy;
      if (Object.keys(patch).length === 0) {
        showError(root, form, h, new Error('Nothing to save: change the surfaces, the spool quota or what happens when the spool is full first.'));
        return;
      }
      save.disabled = true;
      try {
        const saved = await apiResponse('PATCH', nodePath(name, '/settings'), patch, { ifMatch: baseEtag });
        if (stopped) return;
        hideError(root);
        show(saved.body, saved.etag);
        closeForm(form, settingsOpen, { saved: true });
        settings.append(h('p', { class: 'banner banner-success saved', role: 'status' }, 'Settings saved; they reach the node with its next config.'));
      } catch (err) {
        if (stopped) return;
        if (err?.code === PRECONDITION_FAILED) {
          changedMeanwhile(form, err, () => { closeForm(form, settingsOpen, { saved: true }); openSettings(); });
          return;
        }
        showError(root, form, h, err);
        const refused = fieldProblems(err?.message ?? '');
        if (refused.has('spoolQuotaGb')) quota.setProblem(refused.get('spoolQuotaGb'));
      } finally {
        save.disabled = false;
      }
    }
  }

  // ---- delete ----
  const confirmInput = h('input', { id: 'delete-confirm', type: 'text' });
  props(confirmInput, { autocomplete: 'off', spellcheck: false });
  const deleteButton = h('button', { type: 'submit', class: 'btn btn-danger', disabled: true }, 'Delete node');
  confirmInput.addEventListener('input', () => { deleteButton.disabled = confirmInput.value !== name; });
  const deleteForm = h('form', {
    'aria-label': 'Delete node',
    onsubmit: (event) => {
      event.preventDefault();
      void remove();
    },
  },
  h('div', { class: 'field' }, h('label', { for: 'delete-confirm' }, `Type the node's name (${name}) to confirm`), confirmInput),
  h('div', { class: 'toolbar' }, deleteButton));
  const danger = h('section', { class: 'card', 'aria-label': 'Delete node' },
    h('h2', {}, 'Delete node'),
    h('p', {}, 'Deleting revokes the node\'s credentials, stops its unused install, re-enroll and upgrade commands and closes its live '
      + 'connection on every control-plane replica; it cannot reconnect. There is no undo: the name becomes free for a new node, installed afresh. '
      + 'The central node office-primary, installed with the control plane, cannot be deleted once it has enrolled.'),
    deleteForm);

  async function remove() {
    if (confirmInput.value !== name) return;
    deleteButton.disabled = true;
    try {
      await api('DELETE', nodePath(name));
      if (stopped) return;
      navigate('#/nodes');
    } catch (err) {
      if (stopped) return;
      showError(root, danger, h, err);
      deleteButton.disabled = confirmInput.value !== name;
    }
  }

  // ---- loading and refreshing ----
  function schedule(ms) {
    clearTimeout(timer);
    if (!stopped) timer = setTimeout(() => { void refresh(); }, ms);
  }

  function refreshInterval() {
    return node?.onboardingStage === 'config-synced' ? REFRESH_MS : ONBOARDING_REFRESH_MS;
  }

  async function refresh() {
    clearTimeout(timer);
    // Not under an open edit form: closing the last one refreshes (closeForm).
    if (openForms.size > 0) return;
    try {
      const { body: view, etag } = await apiResponse('GET', nodePath(name));
      if (stopped) return;
      // A form opened while this was on its way: its answer is not drawn under it.
      if (openForms.size > 0) return;
      if (refreshBanner) {
        refreshBanner.remove();
        refreshBanner = undefined;
      }
      if (!node) {
        setHidden(configErrorBox, true);
        body.replaceChildren(configErrorBox, onboarding, fieldsCard, commands, h('div', { class: 'grid-2' }, network, settings), danger);
      }
      show(view, etag);
      schedule(refreshInterval());
    } catch (err) {
      if (stopped || openForms.size > 0) return;
      if (!node) body.replaceChildren();
      // Gone or signed out says all; any other failure leaves figures on screen that may be old.
      const stale = node && err?.status !== 404 && err?.status !== 401;
      refreshBanner = showError(root, body, h, stale ? new Error(staleMessage(err, answeredAt)) : err);
      if (stale) markStale();
      // Gone (deleted elsewhere) or signed out: asking again every few seconds changes nothing.
      if (err?.status === 404 || err?.status === 401) return;
      schedule(REFRESH_MS);
    }
  }

  void refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
    commandCleanup?.();
  };
}
