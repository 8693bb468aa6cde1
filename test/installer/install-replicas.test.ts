/**
 * The node's `replicas` reaching the host: the enrollment answer's count written to etc/node.env as
 * ZENOVA_NODE_REPLICAS (1 when the answer has none), node-edge's unit passing it as `serve
 * --replicas` (with a default for an env file without the line, and a stop timeout covering the
 * supervisor's bound), an upgrade or a reenroll adding the line to an older env file (every other
 * line kept), status showing the count, and a warning when the host's memory is short for it. The
 * enrollment, the token redemption and the service manager are stand-ins (fake-host.ts).
 */
import t from 'tap';
import type { Test } from 'tap';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { runStatus } from '../../installer/src/commands/status.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import type { UpgradeTokenRedeemer } from '../../installer/src/install/upgrade-token.js';
import { parseCli } from '../../edge-node/src/cli/args.js';
import { checkReplicasAgainstEnv } from '../../edge-node/src/cli/replica-supervisor.js';
import { productVersion } from '../../proto/src/product-version.js';
import { GiB, captureCli, fakeEnroller, fakeProbe, fakeServices, healthyControlPlane, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-repl-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const DIR = 'opt/zenova-node';
const OLD = '0.0.9';
const NEW = productVersion();

/** fakeEnroller's node n1, with the count the control plane's answer carries (none: an older control plane). */
function enrollerWith(replicas: number | undefined): Enroller {
  return async (opts) => {
    const result = await fakeEnroller(opts);
    return replicas === undefined ? result : { ...result, replicas };
  };
}

function newRoot(t: Test): string {
  const root = mkdtempSync(join(tmpdir(), 'zn-repl-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  return root;
}

async function install(host: HostEnv, pkg: string, extra: string[] = []): Promise<{ exit: number; out: string }> {
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg, '--control-plane', 'https://cp.example.test', '--token', 'tok_install', ...extra], cli.ctx, host);
  return { exit, out: cli.out() + cli.err() };
}

function envOf(root: string): string {
  return readFileSync(join(root, DIR, 'etc/node.env'), 'utf8');
}

function unitOf(root: string): string {
  return readFileSync(join(root, 'etc/systemd/system/node-edge.service'), 'utf8');
}

/** The unit's ExecStart as systemd runs it: `${VAR}` from Environment= defaults, then the env file (which wins), as one argument each. */
function execStartArgs(unit: string, envText: string): { argv: string[]; env: Record<string, string> } {
  const env: Record<string, string> = {};
  for (const m of unit.matchAll(/^Environment=([A-Z0-9_]+)=(.*)$/gm)) env[m[1]!] = m[2]!;
  for (const m of envText.matchAll(/^([A-Z0-9_]+)=(.*)$/gm)) env[m[1]!] = m[2]!;
  const line = /^ExecStart=(.*)$/m.exec(unit)?.[1] ?? '';
  const argv = line.split(' ').map((word) => word.replace(/\$\{([A-Z0-9_]+)\}/g, (_m, name: string) => env[name] ?? ''));
  return { argv: argv.slice(1), env };
}

async function statusOf(host: HostEnv): Promise<{ text: string; json: { replicas?: number | null } }> {
  const text = captureCli(work);
  await runStatus([], text.ctx, host);
  const json = captureCli(work);
  await runStatus(['--json'], json.ctx, host);
  return { text: text.out(), json: JSON.parse(json.out()) as { replicas?: number | null } };
}

t.test('a node created with replicas 3 is installed with ZENOVA_NODE_REPLICAS=3 and a unit that runs serve --replicas with it', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: 'p3.zpkg' });
  const root = newRoot(t);
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: enrollerWith(3) });
  const r = await install(host, pkg.file);
  t.equal(r.exit, 0, r.out);
  t.match(envOf(root), /^ZENOVA_NODE_REPLICAS=3$/m);
  t.match(r.out, /✓ \/opt\/zenova-node\/etc\/node\.env: ZENOVA_NODE_REPLICAS=3 \(3 node-edge processes sharing the caller port\)/);

  const unit = unitOf(root);
  t.match(unit, /^ExecStart=\/opt\/zenova-node\/current\/bin\/zenova-node serve --state-dir \/opt\/zenova-node\/data --listen \$\{ZENOVA_NODE_LISTEN\} --replicas \$\{ZENOVA_NODE_REPLICAS\}$/m);
  t.match(unit, /^Type=notify$/m);
  t.match(unit, /^NotifyAccess=all$/m, 'READY=1 is sent by systemd-notify, a child of the supervisor');
  t.ok(unit.indexOf('Environment=ZENOVA_NODE_REPLICAS=1') < unit.indexOf('EnvironmentFile='), 'a default for an env file without the line, which the file overrides');
  const stopSec = Number(/^TimeoutStopSec=(\d+)$/m.exec(unit)?.[1]);
  t.ok(stopSec >= 20 + 10, `TimeoutStopSec=${stopSec} covers the longest drain (20 s) and the supervisor's 10 s margin`);

  // What systemd runs from these two files is a serve node-edge accepts: --replicas 3 beside ZENOVA_NODE_REPLICAS=3.
  const { argv, env } = execStartArgs(unit, envOf(root));
  const command = parseCli(argv, env);
  t.equal(command.kind, 'serve');
  t.equal((command as { replicas?: number }).replicas, 3);
  t.doesNotThrow(() => checkReplicasAgainstEnv(3, env), 'the flag and the environment agree');

  const status = await statusOf(host);
  t.match(status.text, /^replicas: +3 \(3 node-edge processes sharing the caller port\)$/m);
  t.equal(status.json.replicas, 3);
});

t.test('a node created with replicas 1, or enrolled by a control plane whose answer has no count, gets ZENOVA_NODE_REPLICAS=1', async (t) => {
  for (const [name, replicas] of [['one', 1], ['older control plane', undefined]] as const) {
    const pkg = await buildNodePackage(work, keys, { name: `p1-${name.replace(/ /g, '-')}.zpkg` });
    const root = newRoot(t);
    const host = hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: enrollerWith(replicas) });
    const r = await install(host, pkg.file);
    t.equal(r.exit, 0, r.out);
    t.match(envOf(root), /^ZENOVA_NODE_REPLICAS=1$/m, name);
    const { argv, env } = execStartArgs(unitOf(root), envOf(root));
    t.equal((parseCli(argv, env) as { replicas?: number }).replicas, 1, `${name}: serve --replicas 1, one process`);
    t.doesNotThrow(() => checkReplicasAgainstEnv(1, env));
    t.equal((await statusOf(host)).json.replicas, 1);
  }
});

/** Node n1 installed at OLD, its env file then stripped of the replicas line as an installer from before replicas wrote it. */
async function installedBeforeReplicas(t: Test, extraEnvLine = ''): Promise<{ root: string; host: HostEnv; services: ReturnType<typeof fakeServices>; olderEnv: string }> {
  const root = newRoot(t);
  const services = fakeServices(root);
  const old = await buildNodePackage(work, keys, { name: `old-${Math.random()}.zpkg`, version: OLD });
  const r = await install(hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: fakeEnroller, probeControlPlane: healthyControlPlane({ version: OLD }) }), old.file);
  t.equal(r.exit, 0, r.out);
  const olderEnv = `${envOf(root).replace(/^ZENOVA_NODE_REPLICAS=.*\n/m, '')}HTTPS_PROXY=http://proxy.example.test:3128\n${extraEnvLine}`;
  writeFileSync(join(root, DIR, 'etc/node.env'), olderEnv);
  return { root, services, olderEnv, host: hostEnv(root, { keyPem: keys.publicKeyPem, services }) };
}

t.test("an upgrade adds the control plane's count to an env file without the line, keeping every other line, and rewrites the unit", async (t) => {
  const h = await installedBeforeReplicas(t);
  t.notMatch(h.olderEnv, /ZENOVA_NODE_REPLICAS/);
  const pkg = await buildNodePackage(work, keys, { name: 'up-2.zpkg' });
  const redeem: UpgradeTokenRedeemer = async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion, replicas: 2 });
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_up', '--upgrade'], cli.ctx, { ...h.host, redeemUpgrade: redeem });
  t.equal(exit, 0, cli.out());
  const env = envOf(h.root);
  t.equal(env, `${h.olderEnv.replace(`ZENOVA_NODE_VERSION=${OLD}`, `ZENOVA_NODE_VERSION=${NEW}`)}ZENOVA_NODE_REPLICAS=2\n`, 'the line added at the end, the version replaced, the rest as it was');
  t.match(unitOf(h.root), /--replicas \$\{ZENOVA_NODE_REPLICAS\}$/m);
  t.match(cli.out(), /ZENOVA_NODE_REPLICAS=2: 2 node-edge processes sharing the caller port/);
});

t.test('an upgrade whose answer has no count keeps the installed env file\'s, and writes 1 where there is none', async (t) => {
  const noCount: UpgradeTokenRedeemer = async (req) => ({ nodeId: req.nodeId, nodeName: 'n1', targetVersion: req.toVersion });
  for (const [extra, expected] of [['ZENOVA_NODE_REPLICAS=4\n', 4], ['', 1]] as const) {
    const h = await installedBeforeReplicas(t, extra);
    const pkg = await buildNodePackage(work, keys, { name: `up-none-${expected}.zpkg` });
    const cli = captureCli(work);
    t.equal(await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_up', '--upgrade'], cli.ctx, { ...h.host, redeemUpgrade: noCount }), 0, cli.out());
    const lines = envOf(h.root).split('\n').filter((l) => l.startsWith('ZENOVA_NODE_REPLICAS='));
    t.same(lines, [`ZENOVA_NODE_REPLICAS=${expected}`], 'one line, with the count');
  }
});

t.test("a reenroll writes the enrollment answer's count into an env file without the line, keeping every other line", async (t) => {
  const h = await installedBeforeReplicas(t);
  const pkg = await buildNodePackage(work, keys, { name: 'reenroll.zpkg', version: OLD });
  const host = { ...h.host, enroll: enrollerWith(3), probeControlPlane: healthyControlPlane({ version: OLD }) };
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'tok_re', '--reenroll'], cli.ctx, host);
  t.equal(exit, 0, cli.out());
  t.equal(envOf(h.root), `${h.olderEnv}ZENOVA_NODE_REPLICAS=3\n`);
  t.match(cli.out(), /✓ \/opt\/zenova-node\/etc\/node\.env: ZENOVA_NODE_REPLICAS=3/);
  t.ok(h.services.calls.indexOf('restart node-edge.service') > -1 || h.services.calls.indexOf('start node-edge.service') > -1, 'node-edge runs again with it');
});

t.test('a host with too little memory for the replicas gets a warning, and the install goes on', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: 'mem.zpkg' });
  for (const [replicas, memory, warned] of [[3, 1.5 * GiB, true], [3, 2 * GiB, false], [1, 1 * GiB, false]] as const) {
    const root = newRoot(t);
    const host = hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: enrollerWith(replicas), probe: fakeProbe({ memoryBytes: async () => memory }) });
    const r = await install(host, pkg.file);
    t.equal(r.exit, 0, r.out);
    if (warned) t.match(r.out, /! NODE-HOST-MEMORY-REPLICAS: this host has 1\.5 GiB of memory; the node's 3 replicas \(node-edge processes\) need about 2\.0 GiB/);
    else t.notMatch(r.out, /NODE-HOST-MEMORY-REPLICAS/, `${replicas} replicas in ${memory / GiB} GiB`);
  }
});
