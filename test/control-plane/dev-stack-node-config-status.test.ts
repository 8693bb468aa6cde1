/**
 * What the dev stack's banner says about office-primary's config. A node restarted on its state dir
 * serves its cached config at once and logs `config applied` only for a newer push, so a second
 * `npm start` must take readiness from the `node-edge listening` line instead of waiting 30 s for a
 * push that never comes and then calling a serving node config-less.
 */
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startDevChild, type DevChild } from '../../control-plane/src/dev-stack/child-process.js';
import { configAtStart, describeNodeConfig, nodeConfigStatus } from '../../control-plane/src/dev-stack/node-config-status.js';
import { REPO_ROOT } from '../fixtures/processes.js';

const dir = mkdtempSync(join(tmpdir(), 'zn-devstack-config-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

// As edge-node/src/cli/serve.ts logs them (pino JSON), captured from a restart and a first start.
const LISTENING_FROM_CACHE = { level: 30, time: 1765062000000, msg: 'node-edge listening', url: 'http://127.0.0.1:7480', node: 'office-primary', controlPlane: true, ready: true, configVersion: 14 };
const LISTENING_WITHOUT_CONFIG = { level: 30, time: 1765062000000, msg: 'node-edge listening', url: 'http://127.0.0.1:7480', node: null, controlPlane: true, ready: false, configVersion: null };
const CONFIG_APPLIED = { level: 30, time: 1765062000500, msg: 'config applied', version: 15 };

/** A stand-in node process that prints `lines` (JSON), the next one each time it gets SIGUSR2. */
async function fakeNode(t: { teardown(fn: () => unknown): void }, name: string, first: object, later: object[] = []): Promise<DevChild> {
  const entry = join(dir, `${name}.mjs`);
  writeFileSync(
    entry,
    `const later = ${JSON.stringify(later.map((l) => JSON.stringify(l)))};\n` +
      "process.on('SIGUSR2', () => { const l = later.shift(); if (l) console.log(l); });\n" +
      "process.on('SIGTERM', () => process.exit(0));\n" +
      // Printed last: the handlers above exist by the time the test sees it.
      `console.log(${JSON.stringify(JSON.stringify(first))});\n` +
      'setInterval(() => undefined, 60_000);\n',
  );
  const node = await startDevChild({ name, entry, args: [], env: process.env, cwd: REPO_ROOT, logFile: join(dir, `${name}.log`), readyMsg: 'node-edge listening', timeoutMs: 20_000 });
  t.teardown(() => node.stop());
  return node;
}

/** `promise`, or a failure once `ms` passed: the old code waited its full 30 s here. */
function within<T>(ms: number, promise: Promise<T>): Promise<T | 'too slow'> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'too slow'>((resolve) => { timer = setTimeout(() => resolve('too slow'), ms); });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

t.test("the listening line of a node serving its cached config is read as ready, with that config's version", async (t) => {
  t.same(configAtStart(LISTENING_FROM_CACHE), { version: 14, from: 'cache' });
  t.equal(configAtStart(LISTENING_WITHOUT_CONFIG), undefined, 'a node without a config is not');
  t.equal(configAtStart({ ...LISTENING_FROM_CACHE, ready: 'true' }), undefined, 'only a real true counts');
  t.equal(configAtStart({ msg: 'node-edge listening', url: 'http://127.0.0.1:7480' }), undefined, 'nor a line without the fields');
});

t.test('a restarted node that serves from its cache is reported at once, though no push comes', async (t) => {
  const node = await fakeNode(t, 'restarted', LISTENING_FROM_CACHE);
  const status = await within(5_000, nodeConfigStatus(node, 30_000));
  t.same(status, { version: 14, from: 'cache' }, 'not a 30 s wait for `config applied`');
  t.equal(describeNodeConfig(status === 'too slow' ? undefined : status), 'config v14 from its cache');
});

t.test('a node that starts without a config is waited on until the push is applied', async (t) => {
  const node = await fakeNode(t, 'first-start', LISTENING_WITHOUT_CONFIG, [CONFIG_APPLIED]);
  const pending = nodeConfigStatus(node, 30_000);
  node.child.kill('SIGUSR2');
  const status = await within(10_000, pending);
  t.same(status, { version: 15, from: 'control plane' });
  t.equal(describeNodeConfig(status === 'too slow' ? undefined : status), 'config v15 from the control plane');
});

t.test('a push applied before the banner is reported over the cached config it replaced', async (t) => {
  const node = await fakeNode(t, 'pushed', LISTENING_FROM_CACHE, [CONFIG_APPLIED]);
  node.child.kill('SIGUSR2');
  await node.waitForMsg('config applied', 10_000);
  t.same(await nodeConfigStatus(node, 30_000), { version: 15, from: 'control plane' });
});

t.test('a node without a config that gets none within the wait is reported as having none', async (t) => {
  const node = await fakeNode(t, 'no-config', LISTENING_WITHOUT_CONFIG);
  const status = await nodeConfigStatus(node, 200);
  t.equal(status, undefined);
  t.equal(describeNodeConfig(status), 'no config yet');
});
