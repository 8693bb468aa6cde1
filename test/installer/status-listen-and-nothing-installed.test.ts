/**
 * `zenova status` says what it cannot ask: an installed node whose etc/node.env has no
 * ZENOVA_NODE_LISTEN, or one that is not HOST:PORT, gets a `readiness: UNKNOWN: …` row (as a bad
 * ZENOVA_NODE_REPLICAS gets its INVALID row) instead of no readiness row at all; and
 * `--install-dir D` where nothing is installed says so, also when D has no data/ (not "the state
 * directory D/data does not exist"). Units through the fake service manager, files in a temp root.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readInstalledStatus, runStatus } from '../../installer/src/commands/status.js';
import { NODE_UNIT, installLayout } from '../../installer/src/install/install-layout.js';
import { nodeEdgeUnit, nodeEnvFile } from '../../installer/src/install/unit-files.js';
import { captureCli, fakeServices, hostEnv } from './fake-host.js';

const DIR = '/opt/zenova-node';
const layout = installLayout(DIR);

/** A host with node-edge.service and `current` → releases/0.1.0 at /opt/zenova-node; `env` is etc/node.env's text. */
async function installedHost(t: { teardown(fn: () => unknown): void }, env: string) {
  const root = mkdtempSync(join(tmpdir(), 'zn-status-listen-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const services = fakeServices(root);
  await services.writeUnit(NODE_UNIT, nodeEdgeUnit(layout));
  mkdirSync(join(root, DIR, 'releases/0.1.0'), { recursive: true });
  symlinkSync('releases/0.1.0', join(root, DIR, 'current'));
  mkdirSync(join(root, DIR, 'etc'), { recursive: true });
  writeFileSync(join(root, DIR, 'etc/node.env'), env);
  return { root, host: hostEnv(root, { services }) };
}

const envWith = (listen: string): string => nodeEnvFile(layout, { listen, version: '0.1.0', controlPlaneUrl: 'https://cp.example.test', replicas: 1 });
const withoutListen = (): string => envWith('127.0.0.1:7480').split('\n').filter((line) => !line.startsWith('ZENOVA_NODE_LISTEN=')).join('\n');

t.test('an installed node whose etc/node.env lacks ZENOVA_NODE_LISTEN shows readiness UNKNOWN saying so, in text and JSON', async (t) => {
  const { host } = await installedHost(t, withoutListen());
  const cli = captureCli(tmpdir());
  await runStatus([], cli.ctx, host);
  t.match(cli.out(), /^readiness: +UNKNOWN: ZENOVA_NODE_LISTEN in \/opt\/zenova-node\/etc\/node\.env is missing \(node-edge cannot start\)$/m);
  const json = captureCli(tmpdir());
  await runStatus(['--json'], json.ctx, host);
  t.match(JSON.parse(json.out()), { readiness: { url: null, ready: false, certificateRefused: false, reason: 'ZENOVA_NODE_LISTEN in /opt/zenova-node/etc/node.env is missing (node-edge cannot start)' } });
});

t.test('an installed node whose ZENOVA_NODE_LISTEN is not HOST:PORT shows readiness UNKNOWN saying so', async (t) => {
  for (const listen of ['7480', ':::7480', '0.0.0.0:99999', '']) {
    const { host } = await installedHost(t, envWith(listen));
    const cli = captureCli(tmpdir());
    await runStatus([], cli.ctx, host);
    t.match(cli.out(), /^readiness: +UNKNOWN: ZENOVA_NODE_LISTEN in \/opt\/zenova-node\/etc\/node\.env is not HOST:PORT \(node-edge cannot start\)$/m, `ZENOVA_NODE_LISTEN=${listen}`);
  }
});

t.test('a good ZENOVA_NODE_LISTEN is still asked: readiness is NOT READY with the probe\'s reason when nothing answers', async (t) => {
  const { host } = await installedHost(t, envWith('127.0.0.1:1'));
  const status = await readInstalledStatus(host);
  t.match(status.readiness, { url: 'http://127.0.0.1:1/readyz', ready: false, certificateRefused: false, reason: /^no answer/ });
});

t.test('status --install-dir D with nothing installed says no gateway node is installed at D, with or without D/data', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'zn-status-nothing-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const host = hostEnv(root, { services: fakeServices(root) });
  mkdirSync(join(root, 'srv/empty'), { recursive: true });
  mkdirSync(join(root, 'srv/data-only/data'), { recursive: true });
  for (const [what, dir] of [['a dir that does not exist', '/srv/absent'], ['an empty dir', '/srv/empty'], ['a dir with an empty data/', '/srv/data-only']] as const) {
    const cli = captureCli(tmpdir());
    t.equal(await runStatus(['--install-dir', dir], cli.ctx, host), 1, `${what}: exit 1`);
    t.equal(cli.out(), `node:          no gateway node is installed at ${dir} (no node-edge service, no current release)\n`, `${what}: the nothing-installed message`);
    t.notMatch(cli.out(), /state directory/);
    const json = captureCli(tmpdir());
    await runStatus(['--install-dir', dir, '--json'], json.ctx, host);
    t.match(JSON.parse(json.out()), { installed: false, readiness: null, error: `no gateway node is installed at ${dir} (no node-edge service, no current release)` });
  }
});
