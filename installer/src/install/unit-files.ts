/**
 * The systemd units and env file of a node installation (seed 003 practice): node-edge is
 * Type=notify (READY=1 once it listens, edge-node/src/service/sd-notify.ts), restarts always, and
 * may write only its data dir; the updater is a separate oneshot unit, started by node-edge with
 * `systemctl start --no-block`, so an upgrade that restarts node-edge does not kill the updater.
 */
import type { InstallLayout } from './install-layout.js';
import { NODE_UNIT } from './install-layout.js';

const HARDENING = `ProtectSystem=strict
ProtectHome=true
PrivateTmp=true
NoNewPrivileges=true
ProtectKernelTunables=true
ProtectKernelModules=true
ProtectControlGroups=true
RestrictSUIDSGID=true
RestrictRealtime=true
LockPersonality=true
UMask=0077`;

/** node-edge's TimeoutStopSec: ZENOVA_NODE_SHUTDOWN_DRAIN_MS's most (20 s) + the supervisor's 10 s margin + 5 s. */
export const NODE_STOP_TIMEOUT_S = 35;

export function nodeEdgeUnit(layout: InstallLayout): string {
  return `# Zenova gateway node: written by \`zenova install node\`; do not edit (reinstalls replace it).
[Unit]
Description=Zenova gateway node (node-edge)
After=network-online.target
Wants=network-online.target

[Service]
Type=notify
# READY=1 comes from systemd-notify run by node-edge, with --replicas K by its supervisor once all K
# listen; sent by that helper, not by the main pid, so "main" would not do (see docs/install.md).
NotifyAccess=all
# The default for an env file without the line; the env file's value wins (read after this).
Environment=ZENOVA_NODE_REPLICAS=1
EnvironmentFile=${layout.envFile}
# ZENOVA_NODE_REPLICAS (the node's replicas, from the control plane) node-edge processes share the caller port.
ExecStart=${layout.current}/bin/zenova-node serve --state-dir ${layout.data} --listen \${ZENOVA_NODE_LISTEN} --replicas \${ZENOVA_NODE_REPLICAS}
# Reads the caller port's TLS pair again (ZENOVA_NODE_TLS_CERT_FILE/KEY_FILE in the env file) without dropping connections.
ExecReload=/bin/kill -HUP $MAINPID
Restart=always
RestartSec=2
TimeoutStartSec=90
# The stop's bound: a drain of up to 20 s (ZENOVA_NODE_SHUTDOWN_DRAIN_MS) + 10 s for the replicas to
# end, return credit and close (the supervisor kills them then) + 5 s for it to reap them and exit.
TimeoutStopSec=${NODE_STOP_TIMEOUT_S}
LimitNOFILE=65536
${HARDENING}
# Only the data dir (identity, config cache, spool, update state) is writable.
ReadWritePaths=${layout.data}

[Install]
WantedBy=multi-user.target
`;
}

export function updaterUnit(layout: InstallLayout): string {
  return `# Zenova gateway node updater: written by \`zenova install node\`; do not edit.
[Unit]
Description=Zenova gateway node updater (one-shot, started by ${NODE_UNIT})

[Service]
Type=oneshot
EnvironmentFile=${layout.envFile}
ExecStart=${layout.updater}/bin/zenova-node update --install-dir ${layout.dir}
TimeoutStartSec=300
${HARDENING}
# Installs releases beside the old one and switches current: the install dir is writable.
ReadWritePaths=${layout.dir}
`;
}

/** How etc/node.env starts: an existing one with another start is not the installer's (install-dir-contents.ts). */
export const NODE_ENV_HEADER = '# Written by `zenova install node`.';

/** The env file's line that node-edge's unit passes as `serve --replicas` (the node's `replicas`). */
export const REPLICAS_VARIABLE = 'ZENOVA_NODE_REPLICAS';

/** The count in words, for the installer's steps and status. */
export function describeReplicas(replicas: number): string {
  return replicas === 1 ? 'one node-edge process' : `${replicas} node-edge processes sharing the caller port`;
}

/**
 * `tls`: the caller port serves HTTPS with the pair copied to etc/ (serve reads these two variables).
 * `replicas`: how many node-edge processes serve (the enrollment answer's; 1 before it is known).
 */
export function nodeEnvFile(layout: InstallLayout, opts: { listen: string; version: string; controlPlaneUrl: string; replicas: number; tls?: boolean }): string {
  return `${NODE_ENV_HEADER} No secrets here: the identity and credential are in ${layout.data}.
ZENOVA_NODE_INSTALL_DIR=${layout.dir}
ZENOVA_NODE_LISTEN=${opts.listen}
ZENOVA_NODE_VERSION=${opts.version}
ZENOVA_CONTROL_PLANE_URL=${opts.controlPlaneUrl}
${REPLICAS_VARIABLE}=${opts.replicas}
${opts.tls === true ? `ZENOVA_NODE_TLS_CERT_FILE=${layout.tlsCertFile}\nZENOVA_NODE_TLS_KEY_FILE=${layout.tlsKeyFile}\n` : ''}`;
}
