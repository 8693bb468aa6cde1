/**
 * An IPv6 listen address survives the install: `--listen [::]:PORT` is written to etc/node.env as
 * `[::]:PORT` (brackets kept), which the unit's `zenova-node serve --listen ${ZENOVA_NODE_LISTEN}`,
 * `zenova status` and a later `--reenroll` all read back. A node stands in as an HTTP server on
 * that port answering /readyz, so status and the reenroll's readiness wait really reach it.
 */
import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { readInstalledStatus } from '../../installer/src/commands/status.js';
import { CommandFailure } from '../../installer/src/cli-context.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import { waitForReadiness } from '../../installer/src/install/readiness-wait.js';
import { parseCli } from '../../edge-node/src/cli/args.js';
import { captureCli, fakeServices, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-v6-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const enrollOk: Enroller = async (opts) => {
  mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(join(opts.stateDir, 'identity.json'), '{"nodeName":"n1"}');
  return { nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gatewayTarget: 'gw:8443', stateDir: opts.stateDir, reenrolled: opts.reenroll };
};

/** A stand-in node on [::]:<free port>: /readyz answers 200 and every path asked is recorded. */
async function fakeNodeOnIpv6(t: { teardown(fn: () => unknown): void }): Promise<{ port: number; asked: string[] }> {
  const asked: string[] = [];
  const server = createServer((req, res) => {
    asked.push(`${req.headers.host ?? ''}${req.url ?? ''}`);
    res.writeHead(req.url === '/readyz' ? 200 : 404, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ ready: true, configVersion: 3, controlPlane: { connected: true } }));
  });
  await new Promise<void>((resolve) => server.listen(0, '::', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { port: (server.address() as AddressInfo).port, asked };
}

function installedListen(root: string): string | undefined {
  return /^ZENOVA_NODE_LISTEN=(.*)$/m.exec(readFileSync(join(root, 'opt/zenova-node/etc/node.env'), 'utf8'))?.[1];
}

t.test('an install with --listen [::]:PORT writes [::]:PORT, which node-edge, zenova status and a later --reenroll read back', async (t) => {
  const node = await fakeNodeOnIpv6(t);
  const pkg = await buildNodePackage(work, keys);
  const root = mkdtempSync(join(tmpdir(), 'zn-v6-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: enrollOk, waitReady: waitForReadiness, readyTimeoutMs: 10_000 });
  const base = ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test'];

  const cli = captureCli(work);
  t.equal(await runInstall([...base, '--token', 'zn_it_TOKEN0001', '--listen', `[::]:${node.port}`], cli.ctx, host), 0, cli.out());
  t.match(cli.out(), `✓ port [::]:${node.port} free`);
  t.match(cli.out(), `✓ node-edge ready (http://[::1]:${node.port}/readyz)`);
  const written = installedListen(root);
  t.equal(written, `[::]:${node.port}`, 'the env file keeps the brackets');

  // The unit's ExecStart: zenova-node serve --state-dir <dir>/data --listen ${ZENOVA_NODE_LISTEN}
  const serve = parseCli(['serve', '--state-dir', '/opt/zenova-node/data', '--listen', written ?? '']);
  t.match(serve, { kind: 'serve', listen: { host: '::', port: node.port } }, 'zenova-node serve listens where the operator asked');

  const status = await readInstalledStatus(host);
  t.match(status.readiness, { url: `http://[::1]:${node.port}/readyz`, ready: true, configVersion: 3 }, 'zenova status reaches the node through the written address');

  node.asked.length = 0;
  const re = captureCli(work);
  t.equal(await runInstall([...base, '--token', 'zn_it_REENROLL01', '--reenroll'], re.ctx, host), 0, re.out());
  t.match(re.out(), /Node n1 \(id id-1\) is re-enrolled and ready\./);
  t.ok(node.asked.includes(`[::1]:${node.port}/readyz`), 'the reenroll waited on the installed address');
  t.equal(installedListen(root), `[::]:${node.port}`, 'the reenroll kept the address');

  const same = captureCli(work);
  t.equal(await runInstall([...base, '--token', 'zn_it_REENROLL02', '--reenroll', '--listen', `[::]:${node.port}`], same.ctx, host), 0, 'the installed address given again is no change');
});

t.test('a --reenroll whose installed env file holds an unreadable listen address fails naming that file, not a --listen never given', async (t) => {
  const pkg = await buildNodePackage(work, keys, { name: 'p2.zpkg' });
  const root = mkdtempSync(join(tmpdir(), 'zn-v6-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: enrollOk });
  const base = ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test'];
  t.equal(await runInstall([...base, '--token', 'zn_it_TOKEN0001'], captureCli(work).ctx, host), 0);
  const envFile = join(root, 'opt/zenova-node/etc/node.env');
  // What an earlier installer wrote for --listen [::]:7480.
  writeFileSync(envFile, readFileSync(envFile, 'utf8').replace(/^ZENOVA_NODE_LISTEN=.*$/m, 'ZENOVA_NODE_LISTEN=:::7480'));
  const failure = await runInstall([...base, '--token', 'zn_it_REENROLL01', '--reenroll'], captureCli(work).ctx, host).then(() => undefined, (err: unknown) => err);
  t.type(failure, CommandFailure, 'exit 1, not a usage error');
  t.match((failure as Error).message, /":::7480" \(ZENOVA_NODE_LISTEN in \/opt\/zenova-node\/etc\/node\.env\) is not HOST:PORT \(\[IPv6\]:PORT/);
  t.notMatch((failure as Error).message, /--listen/);
});
