/**
 * How nodes read in a terminal: the list table (the console's node list columns, seed 004 §9.5:
 * status, version, config versions behind, last heartbeat, requests and error rate over 5 min,
 * backfill backlog, local spool), its notes (clock skew, config errors) and the detail fields of
 * `show` and `create`.
 */
import { renderFields, renderTable } from '../../format/table.js';
import type { Column } from '../../format/table.js';
import { MISSING, formatAge, formatBytes, formatCount, formatRatio, formatSkew, orMissing } from '../../format/units.js';
import { unameArch } from '../../host/uname-arch.js';
import type { ConfigError, NodeView } from './api-schemas.js';

/** Where the installer puts a node when the node has no install dir of its own (seed 004 §9.3). */
export const DEFAULT_NODE_INSTALL_DIR = '/opt/zenova-node';

export function nodeListColumns(now: Date): Array<Column<NodeView>> {
  return [
    { header: 'NAME', cell: (n) => n.name },
    { header: 'STATUS', cell: (n) => n.status },
    { header: 'VERSION', cell: (n) => orMissing(n.version) },
    { header: 'CONFIG BEHIND', cell: (n) => formatCount(n.configVersionsBehind), align: 'right' },
    { header: 'LAST HEARTBEAT', cell: (n) => formatAge(n.lastHeartbeatAt, now) },
    { header: 'REQ 5M', cell: (n) => formatCount(n.requests5m), align: 'right' },
    { header: 'ERR 5M', cell: (n) => formatRatio(n.errorRate5m), align: 'right' },
    { header: 'BACKLOG', cell: (n) => formatCount(n.backfillBacklog), align: 'right' },
    { header: 'SPOOL', cell: (n) => formatBytes(n.spoolBytes), align: 'right' },
  ];
}

/**
 * The skew beyond which a node's host clock needs syncing: the node warns CLOCK_SKEW past it
 * (edge-node's MAX_CLOCK_SKEW_MS; the installer imports neither side, so the figure is repeated).
 */
export const CLOCK_SKEW_WARN_MS = 30_000;

function skewNeedsSync(node: NodeView): boolean {
  return typeof node.clockSkewMs === 'number' && Math.abs(node.clockSkewMs) > CLOCK_SKEW_WARN_MS;
}

/** Text from the control plane or a node on one terminal line: control characters (newlines, escapes) become spaces. */
function oneLine(text: string): string {
  return text.replace(/\p{Cc}+/gu, ' ');
}

/**
 * The table, then one line per node whose clock is off by more than 30 s and one per node with a
 * config error (no columns: they are rare).
 */
export function renderNodeTable(nodes: readonly NodeView[], now: Date): string {
  const skewed = nodes.filter(skewNeedsSync);
  const notes = skewed.map((n) => `note: node ${n.name}'s clock is ${formatSkew(n.clockSkewMs, false)} ${(n.clockSkewMs ?? 0) > 0 ? 'ahead of' : 'behind'} the control plane's; sync its host clock (NTP). Meanwhile it judges key and lease expiry by the control plane's time.\n`);
  for (const n of nodes) {
    if (n.configError == null) continue;
    notes.push(`note: node ${n.name} did not apply config version ${n.configError.version} (${oneLine(n.configError.code)}) and keeps serving its last good config; see why: zenova gateway-node show ${n.name}\n`);
  }
  return renderTable(nodeListColumns(now), nodes) + (notes.length > 0 ? `\n${notes.join('')}` : '');
}

function skewField(node: NodeView): string {
  const text = formatSkew(node.clockSkewMs);
  if (text === MISSING) return 'not measured yet';
  return skewNeedsSync(node) ? `${text}  (beyond ±30 s: sync this host's clock)` : text;
}

function withAge(iso: string | null | undefined, now: Date): string {
  if (iso === null || iso === undefined) return 'never';
  return `${iso} (${formatAge(iso, now)})`;
}

function appliedConfigField(version: number | null | undefined): string {
  // undefined: a control plane that does not report it.
  if (version === undefined) return MISSING;
  return version === null ? 'none yet' : `version ${version}`;
}

function configErrorField(error: ConfigError | null | undefined, now: Date): string {
  if (error === undefined) return MISSING;
  if (error === null) return 'none';
  return `${oneLine(error.code)} for version ${error.version}, ${withAge(error.at, now)}: ${oneLine(error.message)}`;
}

export function renderNodeDetail(node: NodeView, now: Date): string {
  const stage = node.onboardingStage ? `  (onboarding: ${node.onboardingStage})` : '';
  // Nodes report Node's name for the CPU (x64); operators know the package's (x86_64).
  const host = node.hostname ? `${node.hostname}${node.arch ? ` (${unameArch(node.arch)})` : ''}` : MISSING;
  const protocol = node.protocolVersion === null || node.protocolVersion === undefined ? '' : `  (protocol ${node.protocolVersion})`;
  const fields: Array<[string, string]> = [
    ['status', `${node.status}${stage}`],
    ['region', orMissing(node.region)],
    ['surfaces', node.surfaces.join(', ')],
    ['address', node.address],
    ['control plane', `${node.controlPlaneUrl}  (CA: ${node.hasCa ? 'own CA' : 'system trust store'})`],
    ['install dir', node.installDir ?? `${DEFAULT_NODE_INSTALL_DIR} (default)`],
    ['spool quota', `${node.spoolQuotaGb} GiB; when full: ${node.spoolFullPolicy}`],
    ['replicas', String(node.replicas)],
    ['version', `${orMissing(node.version)}${protocol}`],
    ['host', host],
    ['enrolled', node.enrolledAt ?? 'not yet'],
    ['last heartbeat', withAge(node.lastHeartbeatAt, now)],
    ['clock skew', skewField(node)],
    ['config applied', appliedConfigField(node.appliedConfigVersion)],
    ['config behind', formatCount(node.configVersionsBehind)],
    ['config error', configErrorField(node.configError, now)],
    ['requests 5m', formatCount(node.requests5m)],
    ['error rate 5m', formatRatio(node.errorRate5m)],
    ['backfill backlog', formatCount(node.backfillBacklog)],
    ['spool used', formatBytes(node.spoolBytes)],
    ['created', node.createdAt],
  ];
  return `Node ${node.name} (id ${node.id})\n${renderFields(fields)}`;
}
