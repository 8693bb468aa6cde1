/**
 * Everything host-side the install, status and logs commands touch, in one object: the real one
 * for the CLI, and in tests a temp host root, a fake probe and a fake service manager.
 */
import type { Enroller } from '../install/install-node.js';
import { probeControlPlane } from '../install/control-plane-probe.js';
import type { ControlPlaneProbe, GatewayProbe } from '../install/control-plane-probe.js';
import { waitForReadiness } from '../install/readiness-wait.js';
import type { ReadinessWaiter } from '../install/readiness-wait.js';
import type { UpgradeTokenRedeemer } from '../install/upgrade-token.js';
import { loadReleasePublicKey } from '../package/release-key.js';
import type { HostProbe } from './host-probe.js';
import { linuxHostProbe } from './linux-host-probe.js';
import type { ServiceManager } from './service-manager.js';
import { systemdServiceManager } from './systemd-service-manager.js';

export interface HostEnv {
  /** '/' in production: every host path the installer reads or writes is under it. */
  hostRoot: string;
  probe: HostProbe;
  services: ServiceManager;
  probeControlPlane: ControlPlaneProbe;
  /** The node gateway check; control-plane-probe.ts probeGateway (real TCP and TLS) by default. */
  probeGateway?: GatewayProbe;
  trustedKeyPem(): Promise<string | undefined>;
  waitReady: ReadinessWaiter;
  readyTimeoutMs?: number;
  /** Token redemption; edge-node's enroll() by default. */
  enroll?: Enroller;
  /** Upgrade-token redemption; POST /api/enroll/upgrade (upgrade-token.ts) by default. */
  redeemUpgrade?: UpgradeTokenRedeemer;
}

export function realHostEnv(): HostEnv {
  return {
    hostRoot: '/',
    probe: linuxHostProbe(),
    services: systemdServiceManager(),
    probeControlPlane,
    trustedKeyPem: () => loadReleasePublicKey(),
    waitReady: waitForReadiness,
  };
}
