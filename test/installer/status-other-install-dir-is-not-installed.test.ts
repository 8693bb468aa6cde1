/**
 * `zenova status --install-dir D` where node-edge.service runs the node in another dir: nothing is
 * installed at D. Status says so and names the unit's dir; it never reports the unit's state or
 * `installed: true` as D's, and never advises a re-enroll (which would act on the healthy node).
 * The same dir spelled another way (a trailing slash, `//`, `.`, a symbolic link) is the unit's.
 * Units through the fake service manager, files in a temp root.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runStatus } from '../../installer/src/commands/status.js';
import { NODE_UNIT, installLayout } from '../../installer/src/install/install-layout.js';
import { nodeEdgeUnit, nodeEnvFile } from '../../installer/src/install/unit-files.js';
import { captureCli, fakeServices, hostEnv } from './fake-host.js';

const DIR = '/opt/zenova-node';
const layout = installLayout(DIR);

/** A host whose active node-edge.service runs the node in /opt/zenova-node (`current` → releases/0.1.0). */
async function installedHost(t: { teardown(fn: () => unknown): void }) {
  const root = mkdtempSync(join(tmpdir(), 'zn-status-other-dir-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  await services.writeUnit(NODE_UNIT, nodeEdgeUnit(layout));
  services.states.set(NODE_UNIT, 'active');
  mkdirSync(join(root, DIR, 'releases/0.1.0'), { recursive: true });
  symlinkSync('releases/0.1.0', join(root, DIR, 'current'));
  mkdirSync(join(root, DIR, 'etc'), { recursive: true });
  writeFileSync(join(root, DIR, 'etc/node.env'), nodeEnvFile(layout, { listen: '127.0.0.1:1', version: '0.1.0', controlPlaneUrl: 'https://cp.example.test', replicas: 1 }));
  return { root, host: hostEnv(root, { services }) };
}

t.test('status --install-dir D, another dir than the one node-edge.service names, says no node is installed at D and where the unit runs it, exit 1', async (t) => {
  const { root, host } = await installedHost(t);
  mkdirSync(join(root, 'srv/empty'), { recursive: true });
  mkdirSync(join(root, 'srv/old/data'), { recursive: true });
  for (const dir of ['/srv/absent', '/srv/empty', '/srv/old', '/opt/zenova-node-2']) {
    const message = `no gateway node is installed at ${dir}: node-edge.service runs the node in /opt/zenova-node, not in ${dir} (leave out --install-dir, or give --install-dir /opt/zenova-node, to see it)`;
    const cli = captureCli(tmpdir());
    t.equal(await runStatus(['--install-dir', dir], cli.ctx, host), 1, `${dir}: exit 1`);
    t.equal(cli.out(), `node:          ${message}\n`, `${dir}: nothing installed at D, the unit's dir named`);
    t.notMatch(cli.out(), /re-?enroll|state directory|^service:/m, `${dir}: no re-enroll advice, no service row`);
    const json = captureCli(tmpdir());
    t.equal(await runStatus(['--install-dir', dir, '--json'], json.ctx, host), 1);
    t.same(JSON.parse(json.out()), {
      installed: false, unfinishedInstall: false, installDir: dir, version: null, brokenCurrent: null,
      service: { unit: 'node-edge.service', state: 'active', installDir: '/opt/zenova-node' },
      readiness: null, node: null, lastUpgrade: null, upgradeInterrupted: null, upgradeRunning: null, error: message,
    }, `${dir}: --json says installed false and names the unit's dir`);
  }
});

t.test('status --install-dir naming the unit\'s dir another way reads the installed node', async (t) => {
  const { root, host } = await installedHost(t);
  mkdirSync(join(root, 'srv'), { recursive: true });
  symlinkSync('../opt/zenova-node', join(root, 'srv/node-link'));
  for (const dir of ['/opt/zenova-node', '/opt/zenova-node/', '/opt//zenova-node', '/opt/./zenova-node', '/srv/node-link']) {
    const json = captureCli(tmpdir());
    await runStatus(['--install-dir', dir, '--json'], json.ctx, host);
    const status = JSON.parse(json.out()) as { installed: boolean; version: string | null; service: Record<string, unknown> };
    t.equal(status.installed, true, `${dir}: installed`);
    t.equal(status.version, '0.1.0', `${dir}: the installed release`);
    t.same(status.service, { unit: 'node-edge.service', state: 'active' }, `${dir}: the unit's own state, no other dir named`);
  }
});
