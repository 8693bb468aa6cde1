/**
 * Child of upgrade-interrupted.test.ts: runs `zenova install node --upgrade` on ROOT with a fake
 * host whose readiness wait writes MARKER and then hangs, so the parent can kill this process
 * there — after the switch, before any outcome — as a dropped SSH session or a power loss would.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { runInstall } from '../../installer/src/commands/install.js';
import { captureCli, fakeServices, healthyControlPlane, hostEnv } from './fake-host.js';

const [root, pkgFile, keyFile, marker] = process.argv.slice(2) as [string, string, string, string];
const host = hostEnv(root, {
  keyPem: readFileSync(keyFile, 'utf8'),
  services: fakeServices(root),
  probeControlPlane: healthyControlPlane(),
  redeemUpgrade: async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion }),
  waitReady: async () => {
    writeFileSync(marker, 'waiting for readiness\n');
    await new Promise((resolve) => setTimeout(resolve, 120_000));
    return { ready: false, reason: 'the parent should have killed this process' };
  },
});
const cli = captureCli(root);
process.exitCode = await runInstall(['node', '--package', pkgFile, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_upgrade_1', '--upgrade'], cli.ctx, host);
