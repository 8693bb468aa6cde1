/**
 * A node created with replicas 2, installed end to end against a real control plane: the enrollment
 * answer's count reaches etc/node.env, and node-edge started the way the installed unit says (its
 * ExecStart with `${VAR}` expanded from the unit's Environment= and the env file, as systemd does;
 * the fake service manager runs `zenova-node serve` from the sources in place of the release's
 * launcher) runs two replicas behind one caller port: the installer's readiness wait passes, a real
 * call answers, and the supervisor's merged /metrics on the admin port carries both replicas.
 */
import t from 'tap';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { testDatabase } from '../fixtures/postgres.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import type { StartedProcess } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { callNode, configureDemo, createNode, freePort, httpsMaterial, startControlPlane, tempDir, tokenOf } from './stack.js';
import { runInstall } from '../../installer/src/commands/install.js';
import { runStatus } from '../../installer/src/commands/status.js';
import { probeControlPlane } from '../../installer/src/install/control-plane-probe.js';
import { waitForReadiness } from '../../installer/src/install/readiness-wait.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { captureCli, fakeProbe, fakeServices } from '../installer/fake-host.js';
import { buildNodePackage, releaseKeys } from '../installer/package-builder.js';

const INSTALL_DIR = '/opt/zenova-node';

/** The installed unit's ExecStart as systemd would run it: `${VAR}` from Environment= defaults, then the env file (which wins). */
function unitCommand(unit: string, envText: string): { argv: string[]; env: Record<string, string> } {
  const env: Record<string, string> = {};
  for (const m of unit.matchAll(/^Environment=([A-Z0-9_]+)=(.*)$/gm)) env[m[1]!] = m[2]!;
  for (const m of envText.matchAll(/^([A-Z0-9_]+)=(.*)$/gm)) env[m[1]!] = m[2]!;
  const line = /^ExecStart=(.*)$/m.exec(unit)?.[1];
  if (line === undefined) throw new Error('the unit has no ExecStart');
  return { argv: line.split(' ').map((word) => word.replace(/\$\{([A-Z0-9_]+)\}/g, (_m, name: string) => env[name] ?? '')), env };
}

t.test('a node created with replicas 2 is installed running two node-edge processes behind its caller port', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-replicas-');
  const https = await httpsMaterial(join(work, 'https'));
  const cp = await startControlPlane(t, { db, https, gatewayTlsDir: join(work, 'gw') });
  const upstream = await startFakeUpstream(t);
  const { apiKey } = await configureDemo(cp, upstream.url);
  const keys = releaseKeys();
  const pkg = await buildNodePackage(work, keys);
  const port = await freePort();
  const adminPort = await freePort();
  const root = join(work, 'host');
  mkdirSync(root);

  let node: StartedProcess | undefined;
  const started: string[][] = [];
  const services = fakeServices(root, {
    onStart: async () => {
      const { argv, env } = unitCommand(
        readFileSync(join(root, 'etc/systemd/system/node-edge.service'), 'utf8'),
        readFileSync(join(root, INSTALL_DIR.slice(1), 'etc/node.env'), 'utf8'),
      );
      t.equal(argv[0], `${INSTALL_DIR}/current/bin/zenova-node`);
      // The installed paths live under the host root here.
      const args = argv.slice(1).map((a) => (a.startsWith(`${INSTALL_DIR}/`) ? join(root, a) : a));
      started.push(args);
      const { command, args: entry } = tsEntry('edge-node/src/main.ts');
      node = await startProcess({
        name: 'node-edge (installed, replicas)',
        command,
        args: [...entry, ...args],
        env: { ...env, ZENOVA_NODE_ADMIN_LISTEN: `127.0.0.1:${adminPort}`, ZENOVA_NODE_RECONNECT_BASE_MS: '100', ZENOVA_NODE_RECONNECT_MAX_MS: '500' },
        t,
      });
    },
    onStop: async () => {
      await node?.stop();
      node = undefined;
    },
  });
  const host: HostEnv = {
    hostRoot: root,
    probe: fakeProbe(),
    services,
    probeControlPlane,
    trustedKeyPem: async () => keys.publicKeyPem,
    waitReady: waitForReadiness,
    readyTimeoutMs: 60_000,
  };

  const created = await createNode(cp, 'twice', { replicas: 2 });
  const cli = captureCli(work);
  const exit = await runInstall(
    ['node', '--package', pkg.file, '--control-plane', cp.url, '--ca-file', https.caFile, '--listen', `127.0.0.1:${port}`, '--token', tokenOf(created.install.command)],
    cli.ctx,
    host,
  );
  if (!t.equal(exit, 0, 'installed')) t.comment(cli.out() + cli.err());
  t.match(cli.out(), /✓ \/opt\/zenova-node\/etc\/node\.env: ZENOVA_NODE_REPLICAS=2 \(2 node-edge processes sharing the caller port\)/);
  t.match(cli.out(), /✓ node-edge ready/);
  t.match(readFileSync(join(root, 'opt/zenova-node/etc/node.env'), 'utf8'), /^ZENOVA_NODE_REPLICAS=2$/m);
  t.same(started.map((args) => args.slice(-2)), [['--replicas', '2']], 'serve was run with --replicas 2');

  t.equal(await callNode(`http://127.0.0.1:${port}`, apiKey), 200, 'a real call through the installed node works');
  // Both replicas serve: the supervisor's merged metrics carry each one's samples and its up gauge.
  const metrics = await waitFor(async () => {
    const res = await fetch(`http://127.0.0.1:${adminPort}/metrics`);
    const text = await res.text();
    return /zenova_node_replica_up\{replica="1"\} 1/.test(text) && /zenova_node_replica_up\{replica="2"\} 1/.test(text) ? text : undefined;
  }, { what: 'both replicas answering the admin scrape', timeoutMs: 20_000 });
  t.match(metrics, /^zenova_node_replicas 2$/m);
  t.match(metrics, /replica="1"/);
  t.match(metrics, /replica="2"/);

  const status = captureCli(work);
  t.equal(await runStatus(['--json'], status.ctx, host), 0);
  t.match(JSON.parse(status.out()), { replicas: 2, readiness: { ready: true } });
  await services.stop('node-edge.service');
});
