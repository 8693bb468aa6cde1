/**
 * How nodes read in a terminal: the list table (the console's node list columns, seed 004 §9.5:
 * status, version, config versions behind, last heartbeat, requests and error rate over 5 min,
 * backfill backlog, local spool) and the detail fields of `show` and `create`.
 */
import { renderFields, renderTable } from '../../format/table.js';
import type { Column } from '../../format/table.js';
import { MISSING, formatAge, formatBytes, formatCount, formatRatio, orMissing } from '../../format/units.js';
import type { NodeView } from './api-schemas.js';

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

export function renderNodeTable(nodes: readonly NodeView[], now: Date): string {
  return renderTable(nodeListColumns(now), nodes);
}

function withAge(iso: string | null | undefined, now: Date): string {
  if (iso === null || iso === undefined) return 'never';
  return `${iso} (${formatAge(iso, now)})`;
}

export function renderNodeDetail(node: NodeView, now: Date): string {
  const stage = node.onboardingStage ? `  (onboarding: ${node.onboardingStage})` : '';
  const host = node.hostname ? `${node.hostname}${node.arch ? ` (${node.arch})` : ''}` : MISSING;
  const protocol = node.protocolVersion === null || node.protocolVersion === undefined ? '' : `  (protocol ${node.protocolVersion})`;
  const fields: Array<[string, string]> = [
    ['status', `${node.status}${stage}`],
    ['region', orMissing(node.region)],
    ['surfaces', node.surfaces.join(', ')],
    ['address', node.address],
    ['control plane', `${node.controlPlaneUrl}  (CA: ${node.hasCa ? 'own CA' : 'system trust store'})`],
    ['install dir', node.installDir ?? `${DEFAULT_NODE_INSTALL_DIR} (default)`],
    ['spool quota', `${node.spoolQuotaGb} GB; when full: ${node.spoolFullPolicy}`],
    ['replicas', String(node.replicas)],
    ['version', `${orMissing(node.version)}${protocol}`],
    ['host', host],
    ['enrolled', node.enrolledAt ?? 'not yet'],
    ['last heartbeat', withAge(node.lastHeartbeatAt, now)],
    ['config behind', formatCount(node.configVersionsBehind)],
    ['requests 5m', formatCount(node.requests5m)],
    ['error rate 5m', formatRatio(node.errorRate5m)],
    ['backfill backlog', formatCount(node.backfillBacklog)],
    ['spool used', formatBytes(node.spoolBytes)],
    ['created', node.createdAt],
  ];
  return `Node ${node.name} (id ${node.id})\n${renderFields(fields)}`;
}
