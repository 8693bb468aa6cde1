/**
 * `zenova install node --tls-cert/--tls-key` on a fake host: the pair is checked before anything is
 * written (NODE-TLS-PAIR), copied into etc/ (key 0600, cert 0644) and named in etc/node.env, the
 * unit reloads it on `systemctl reload`, and the readiness wait, `--reenroll` and `zenova status`
 * ask /readyz over https on loopback, trusting only the node's certificate (a real HTTPS server
 * stands in for node-edge, with a certificate for a DNS name only, as an ingress certificate is).
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { runInstall } from '../../installer/src/commands/install.js';
import { readInstalledStatus } from '../../installer/src/commands/status.js';
import { UsageError } from '../../installer/src/cli-context.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import { readyzUrl, waitForReadiness } from '../../installer/src/install/readiness-wait.js';
import type { ReadinessWaiter } from '../../installer/src/install/readiness-wait.js';
import { issueServerCert as issueWithValidity } from '../../control-plane/src/tls/self-signed.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';
import type { IssuedCert } from '../fixtures/tls.js';
import { captureCli, fakeServices, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-install-tls-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const enrollOk: Enroller = async (opts) => {
  mkdirSync(opts.stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(join(opts.stateDir, 'identity.json'), '{"nodeName":"n1"}');
  return { nodeId: 'id-1', nodeName: 'n1', controlPlaneUrl: opts.controlPlaneUrl, gatewayTarget: 'gw:8443', stateDir: opts.stateDir, reenrolled: opts.reenroll === true };
};

function writePair(dir: string, name: string, pair: { certPem: string; keyPem: string }): { certFile: string; keyFile: string } {
  const certFile = join(dir, `${name}-cert.pem`);
  const keyFile = join(dir, `${name}-key.pem`);
  writeFileSync(certFile, pair.certPem);
  writeFileSync(keyFile, pair.keyPem, { mode: 0o600 });
  return { certFile, keyFile };
}

/** node-edge's stand-in: HTTPS on 127.0.0.1 with `pair`, answering /readyz 200. */
async function readyzServer(t: { teardown(fn: () => unknown): void }, pair: IssuedCert): Promise<number> {
  const server = https.createServer({ cert: pair.certPem, key: pair.keyPem }, (req, res) => {
    res.writeHead(req.url === '/readyz' ? 200 : 404, { 'content-type': 'application/json' }).end(JSON.stringify({ ready: true, configVersion: 7, controlPlane: { connected: true } }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }));
  return (server.address() as AddressInfo).port;
}

const ca = await createTestCa();
// An ingress certificate: a DNS name, no loopback address in it.
const nodeCert = await issueServerCert(ca, { dnsNames: ['node-1.example.test'] });
const pkg = await buildNodePackage(work, keys);

function newRoot(t: { teardown(fn: () => unknown): void }): string {
  const root = mkdtempSync(join(tmpdir(), 'zn-install-tls-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  return root;
}

t.test('--tls-cert/--tls-key are checked, copied into etc/ (key 0600, cert 0644), named in node.env, and readiness is awaited over https trusting only that certificate', async (t) => {
  const root = newRoot(t);
  const files = writePair(work, 'good', nodeCert);
  const port = await readyzServer(t, nodeCert);
  const waits: Array<Parameters<ReadinessWaiter>[0]> = [];
  const waitReady: ReadinessWaiter = async (opts) => {
    waits.push(opts);
    return waitForReadiness({ ...opts, timeoutMs: 10_000 });
  };
  const services = fakeServices(root);
  const cli = captureCli(work);
  const exit = await runInstall(
    ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_TLSINSTALL1', '--listen', `127.0.0.1:${port}`, '--tls-cert', files.certFile, '--tls-key', files.keyFile],
    cli.ctx,
    hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: enrollOk, waitReady }),
  );
  t.equal(exit, 0, cli.out());
  t.match(cli.out(), /✓ caller TLS certificate .*good-cert\.pem and its key .*good-key\.pem \(valid until/);
  const etc = join(root, 'opt/zenova-node/etc');
  t.equal(readFileSync(join(etc, 'tls-cert.pem'), 'utf8'), nodeCert.certPem);
  t.equal(readFileSync(join(etc, 'tls-key.pem'), 'utf8'), nodeCert.keyPem);
  t.equal(statSync(join(etc, 'tls-key.pem')).mode & 0o777, 0o600, 'the key is 0600');
  t.equal(statSync(join(etc, 'tls-cert.pem')).mode & 0o777, 0o644, 'the certificate is 0644');
  const env = readFileSync(join(etc, 'node.env'), 'utf8');
  t.match(env, /^ZENOVA_NODE_TLS_CERT_FILE=\/opt\/zenova-node\/etc\/tls-cert\.pem$/m);
  t.match(env, /^ZENOVA_NODE_TLS_KEY_FILE=\/opt\/zenova-node\/etc\/tls-key\.pem$/m);
  t.match(readFileSync(join(root, 'etc/systemd/system/node-edge.service'), 'utf8'), /^ExecReload=\/bin\/kill -HUP \$MAINPID$/m, 'systemctl reload sends SIGHUP');
  t.equal(waits[0]?.url, `https://127.0.0.1:${port}/readyz`);
  t.equal(waits[0]?.tlsCertPem, nodeCert.certPem);
  t.match(cli.out(), new RegExp(`node-edge ready \\(https://127\\.0\\.0\\.1:${port}/readyz\\)`));

  t.test('zenova status asks /readyz over https with the installed certificate', async (t) => {
    const status = await readInstalledStatus(hostEnv(root, { services }));
    t.match(status.readiness, { url: `https://127.0.0.1:${port}/readyz`, ready: true, configVersion: 7 });
  });

  t.test('--reenroll keeps the installed pair and waits for readiness over https; new TLS files with it are refused', async (t) => {
    const reenrollWaits: Array<Parameters<ReadinessWaiter>[0]> = [];
    const again = captureCli(work);
    const code = await runInstall(
      ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_TLSREENROLL1', '--reenroll'],
      again.ctx,
      hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: enrollOk, waitReady: async (opts) => (reenrollWaits.push(opts), waitForReadiness({ ...opts, timeoutMs: 10_000 })) }),
    );
    t.equal(code, 0, again.out());
    t.equal(reenrollWaits[0]?.url, `https://127.0.0.1:${port}/readyz`);
    t.equal(reenrollWaits[0]?.tlsCertPem, nodeCert.certPem);
    t.equal(readFileSync(join(etc, 'tls-key.pem'), 'utf8'), nodeCert.keyPem, 'the key is kept');
    t.match(readFileSync(join(etc, 'node.env'), 'utf8'), /^ZENOVA_NODE_TLS_CERT_FILE=/m, 'node.env still names the pair');

    const refused = await runInstall(
      ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_TLSREENROLL2', '--reenroll', '--tls-cert', files.certFile, '--tls-key', files.keyFile],
      captureCli(work).ctx,
      hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: enrollOk }),
    ).then((code) => new Error(`exit ${code}`), (err: unknown) => err as Error);
    t.type(refused, UsageError);
    t.match(refused.message, /cannot be used with --reenroll: a reenroll keeps the installed node's etc\/ and its TLS pair/);
  });
});

t.test('the readiness wait over https refuses a server on the port that presents another certificate, even one from the same CA', async (t) => {
  const impostor = await issueServerCert(ca, { dnsNames: ['node-1.example.test'], ipAddresses: ['127.0.0.1'] });
  const port = await readyzServer(t, impostor);
  const outcome = await waitForReadiness({ url: readyzUrl({ host: '0.0.0.0', port }, true), unit: 'node-edge.service', services: fakeServices(newRoot(t)), timeoutMs: 1_000, tlsCertPem: nodeCert.certPem });
  t.equal(outcome.ready, false);
  t.match(outcome.ready ? '' : outcome.reason, /no answer on https:\/\/127\.0\.0\.1:\d+\/readyz/);
});

t.test('a bad pair is refused with NODE-TLS-PAIR before anything is written, and one flag alone is a usage error', async (t) => {
  const other = await issueServerCert(ca, { dnsNames: ['node-1.example.test'] });
  const expired = await issueWithValidity(ca, { dnsNames: ['node-1.example.test'], validityDays: 1, issuedAt: new Date(Date.now() - 3 * 24 * 60 * 60_000) });
  const mismatched = { certFile: writePair(work, 'mismatch', nodeCert).certFile, keyFile: writePair(work, 'other', other).keyFile };
  const old = writePair(work, 'expired', expired);
  const notPem = join(work, 'not-pem.txt');
  writeFileSync(notPem, 'not a certificate\n');
  const fifo = join(work, 'cert.fifo');
  execFileSync('mkfifo', [fifo]);
  const huge = join(work, 'huge.pem');
  writeFileSync(huge, Buffer.alloc(300 * 1024, 0x41));
  const cases: Array<[string, { certFile: string; keyFile: string }, RegExp]> = [
    ['a key of another certificate', mismatched, /NODE-TLS-PAIR: the TLS key file .*other-key\.pem is not the private key of the certificate in .*mismatch-cert\.pem/],
    ['an expired certificate', old, /NODE-TLS-PAIR: the TLS certificate in .*expired-cert\.pem expired on/],
    ['a file that is not PEM', { certFile: notPem, keyFile: old.keyFile }, /NODE-TLS-PAIR: the TLS certificate file .*not-pem\.txt holds no PEM certificate/],
    ['a missing file', { certFile: join(work, 'absent.pem'), keyFile: old.keyFile }, /NODE-TLS-PAIR: cannot read the TLS certificate file .*absent\.pem: it does not exist/],
    // Neither blocks the run (a FIFO's read would wait for a writer forever) nor is read whole.
    ['a FIFO', { certFile: fifo, keyFile: old.keyFile }, /NODE-TLS-PAIR: cannot read the TLS certificate file .*cert\.fifo: it is not a regular file/],
    ['a device', { certFile: old.certFile, keyFile: '/dev/zero' }, /NODE-TLS-PAIR: cannot read the TLS key file \/dev\/zero: it is not a regular file/],
    ['a huge file', { certFile: huge, keyFile: old.keyFile }, /NODE-TLS-PAIR: the TLS certificate file .*huge\.pem is larger than 256 KiB/],
  ];
  for (const [what, files, message] of cases) {
    const root = newRoot(t);
    const services = fakeServices(root);
    const cli = captureCli(work);
    const exit = await runInstall(
      ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_TLSBAD1', '--tls-cert', files.certFile, '--tls-key', files.keyFile],
      cli.ctx,
      hostEnv(root, { keyPem: keys.publicKeyPem, services, enroll: enrollOk }),
    );
    t.equal(exit, 1, `${what}: exit 1`);
    t.match(cli.out(), message, `${what}: the finding names the file`);
    t.match(cli.out(), /blocking finding.*; nothing was written/);
    t.notOk(existsSync(join(root, 'opt/zenova-node')), `${what}: nothing written`);
    t.same(services.calls, [], `${what}: no unit touched`);
  }
  for (const flags of [['--tls-cert', old.certFile], ['--tls-key', old.keyFile]]) {
    const refused = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_TLSBAD2', ...flags], captureCli(work).ctx, hostEnv(newRoot(t), { keyPem: keys.publicKeyPem, enroll: enrollOk })).then(
      (code) => new Error(`exit ${code}`),
      (err: unknown) => err as Error,
    );
    t.type(refused, UsageError, `${flags[0]} alone`);
    t.match(refused.message, /give both the certificate and its key, or neither/);
  }
});
