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

export function nodeEdgeUnit(layout: InstallLayout): string {
  return `# Zenova gateway node: written by \`zenova install node\`; do not edit (reinstalls replace it).
[Unit]
Description=Zenova gateway node (node-edge)
After=network-online.target
Wants=network-online.target

[Service]
Type=notify
# READY=1 comes from systemd-notify run by node-edge (see docs/install.md).
NotifyAccess=all
EnvironmentFile=${layout.envFile}
ExecStart=${layout.current}/bin/zenova-node serve --state-dir ${layout.data} --listen \${ZENOVA_NODE_LISTEN}
# Reads the caller port's TLS pair again (ZENOVA_NODE_TLS_CERT_FILE/KEY_FILE in the env file) without dropping connections.
ExecReload=/bin/kill -HUP $MAINPID
Restart=always
RestartSec=2
TimeoutStartSec=90
TimeoutStopSec=30
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

/** `tls`: the caller port serves HTTPS with the pair copied to etc/ (serve reads these two variables). */
export function nodeEnvFile(layout: InstallLayout, opts: { listen: string; version: string; controlPlaneUrl: string; tls?: boolean }): string {
  return `${NODE_ENV_HEADER} No secrets here: the identity and credential are in ${layout.data}.
ZENOVA_NODE_INSTALL_DIR=${layout.dir}
ZENOVA_NODE_LISTEN=${opts.listen}
ZENOVA_NODE_VERSION=${opts.version}
ZENOVA_CONTROL_PLANE_URL=${opts.controlPlaneUrl}
${opts.tls === true ? `ZENOVA_NODE_TLS_CERT_FILE=${layout.tlsCertFile}\nZENOVA_NODE_TLS_KEY_FILE=${layout.tlsKeyFile}\n` : ''}`;
}
