/**
 * Child of upgrade-failures.test.ts: runs `zenova install node --upgrade` on ROOT with a fake host
 * that writes MARKER and then hangs at WHERE, so the parent can kill this process there, as a
 * dropped SSH session or a power loss would: `readiness` (after the switch, before any outcome) or
 * `reload` (the token redeemed and the upgrade recorded, the env file and units written, the links
 * not yet switched) or `switch-back` (the new release was not ready; the links are back and the
 * previous release restarted, its readiness not yet seen).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { runInstall } from '../../installer/src/commands/install.js';
import { captureCli, fakeServices, healthyControlPlane, hostEnv } from './fake-host.js';

const [root, pkgFile, keyFile, marker, where = 'readiness'] = process.argv.slice(2) as [string, string, string, string, string?];
const hang = async (): Promise<void> => {
  writeFileSync(marker, `hanging at ${where}\n`);
  await new Promise((resolve) => setTimeout(resolve, 120_000));
};
const services = fakeServices(root);
if (where === 'reload') services.reload = hang;
let waits = 0;
const host = hostEnv(root, {
  keyPem: readFileSync(keyFile, 'utf8'),
  services,
  probeControlPlane: healthyControlPlane(),
  redeemUpgrade: async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion }),
  waitReady: async () => {
    waits += 1;
    if (where === 'switch-back' && waits === 1) return { ready: false, reason: 'node-edge.service was not ready within 60 s' };
    await hang();
    return { ready: false, reason: 'the parent should have killed this process' };
  },
});
const cli = captureCli(root);
process.exitCode = await runInstall(['node', '--package', pkgFile, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_upgrade_1', '--upgrade'], cli.ctx, host);
