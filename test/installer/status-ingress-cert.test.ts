/**
 * `zenova status` on a node that serves HTTPS names ingress-certificate trouble for what it is: a
 * served certificate that expired (and whether the installed file is renewed already), a node still
 * serving another certificate than the installed file (renewed, not reloaded), an issuer the file
 * does not vouch for; and it warns, without failing, within 14 days of the installed file's expiry.
 * A real HTTPS server with generated certificates stands in for node-edge.
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { formatInstalledStatus, readInstalledStatus } from '../../installer/src/commands/status.js';
import type { InstalledStatus } from '../../installer/src/commands/status.js';
import { certificateRefusal } from '../../installer/src/install/node-tls-probe.js';
import { createCa, issueServerCert } from '../../control-plane/src/tls/self-signed.js';
import type { PemKeyPair } from '../../control-plane/src/tls/self-signed.js';
import { fakeServices, hostEnv } from './fake-host.js';

const DAY_MS = 24 * 60 * 60_000;
const CERT_FILE = '/opt/zenova-node/etc/tls-cert.pem';
// A CA issued well in the past, so it can sign certificates that have expired by now.
const ca = await createCa('status ingress cert test CA', { validityDays: 365, issuedAt: new Date(Date.now() - 100 * DAY_MS) });
const cert = (issuedDaysAgo: number, validityDays: number): Promise<PemKeyPair> =>
  issueServerCert(ca, { dnsNames: ['node-1.example.test'], validityDays, issuedAt: new Date(Date.now() - issuedDaysAgo * DAY_MS) });
const expired = await cert(40, 30);
const expiresIn3Days = await cert(27, 30);
const renewed = await cert(0, 90);

/** node-edge's stand-in: HTTPS on 127.0.0.1 serving `served`, answering /readyz 200. */
async function readyzServer(t: Test, served: PemKeyPair): Promise<number> {
  const server = https.createServer({ cert: served.certPem, key: served.keyPem }, (req, res) => {
    res.writeHead(req.url === '/readyz' ? 200 : 404, { 'content-type': 'application/json' }).end(JSON.stringify({ ready: true, configVersion: 7, controlPlane: { connected: true } }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }));
  return (server.address() as AddressInfo).port;
}

/** `zenova status` of a host whose node listens on `port` over HTTPS with `installedPem` as its certificate file. */
async function statusOf(t: Test, port: number, installedPem: string): Promise<{ status: InstalledStatus; text: string }> {
  const root = mkdtempSync(join(tmpdir(), 'zn-status-cert-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const etc = join(root, 'opt/zenova-node/etc');
  mkdirSync(etc, { recursive: true });
  mkdirSync(join(root, 'opt/zenova-node/data'), { recursive: true, mode: 0o700 });
  mkdirSync(join(root, 'opt/zenova-node/releases/0.1.0'), { recursive: true });
  symlinkSync('releases/0.1.0', join(root, 'opt/zenova-node/current'));
  writeFileSync(join(etc, 'tls-cert.pem'), installedPem);
  writeFileSync(join(etc, 'node.env'), `ZENOVA_NODE_LISTEN=0.0.0.0:${port}\nZENOVA_NODE_TLS_CERT_FILE=${CERT_FILE}\nZENOVA_NODE_TLS_KEY_FILE=/opt/zenova-node/etc/tls-key.pem\n`);
  const status = await readInstalledStatus(hostEnv(root, { services: fakeServices(root) }), '/opt/zenova-node');
  return { status, text: formatInstalledStatus(status) };
}

t.test('an expired certificate still served is named as such, with the file to renew and the reload, not as no answer', async (t) => {
  const { status, text } = await statusOf(t, await readyzServer(t, expired), expired.certPem);
  t.match(status.readiness, { ready: false, certificateRefused: true });
  t.match(text, /^readiness: +UNKNOWN: the node's ingress certificate \(served\) expired at \S+: renew \/opt\/zenova-node\/etc\/tls-cert\.pem and `systemctl reload node-edge`$/m);
  t.match(text, /^ingress cert: +EXPIRED: \/opt\/zenova-node\/etc\/tls-cert\.pem expired on /m);
  t.notMatch(text, /no answer/);
});

t.test('an expired certificate still served while the file is renewed already says to reload, not to renew', async (t) => {
  const { text } = await statusOf(t, await readyzServer(t, expired), renewed.certPem);
  t.match(text, /^readiness: +UNKNOWN: the node's ingress certificate \(served\) expired at \S+; \/opt\/zenova-node\/etc\/tls-cert\.pem is renewed already \(valid until \S+\): `systemctl reload node-edge` to serve it$/m);
});

t.test('renewed files not yet reloaded: the node serves another certificate than the file, and status says to reload node-edge', async (t) => {
  const { status, text } = await statusOf(t, await readyzServer(t, expiresIn3Days), renewed.certPem);
  t.match(status.readiness, { ready: false, certificateRefused: true, configVersion: null }, 'no answer is taken from a server the probe refused');
  t.match(text, /^readiness: +UNKNOWN: the node serves another certificate than \/opt\/zenova-node\/etc\/tls-cert\.pem: reload node-edge \(SIGHUP: `systemctl reload node-edge`\) to take the new one$/m);
  t.match(text, /^ingress cert: +\/opt\/zenova-node\/etc\/tls-cert\.pem, valid until \S+ \(8\d days left\)$/m);
  t.notMatch(text, /no answer|UNABLE_TO_GET_ISSUER_CERT_LOCALLY/);
});

t.test('within 14 days of the installed certificate\'s expiry the node is ready and status warns to renew it', async (t) => {
  const { status, text } = await statusOf(t, await readyzServer(t, expiresIn3Days), expiresIn3Days.certPem);
  t.match(status.readiness, { ready: true, certificateRefused: false, configVersion: 7, certificate: { file: CERT_FILE } });
  t.ok((status.readiness?.certificate?.daysLeft ?? 99) < 14, 'days left below the warning figure');
  t.match(text, /^readiness: +ready \(config version 7\)$/m);
  t.match(text, /^ingress cert: +RENEW SOON: \/opt\/zenova-node\/etc\/tls-cert\.pem expires on \S+ \([23] days left\): renew it, replace the files and `systemctl reload node-edge`$/m);
});

t.test('a certificate with more than 14 days left shows its validity without a warning', async (t) => {
  const { text } = await statusOf(t, await readyzServer(t, renewed), renewed.certPem);
  t.match(text, /^readiness: +ready \(config version 7\)$/m);
  t.match(text, /^ingress cert: +\/opt\/zenova-node\/etc\/tls-cert\.pem, valid until \S+ \(8\d days left\)$/m);
  t.notMatch(text, /RENEW SOON|EXPIRED/);
});

t.test('a port nothing listens on is still no answer, not a certificate problem', async (t) => {
  const closed = https.createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const port = (closed.address() as AddressInfo).port;
  await new Promise((resolve) => closed.close(resolve));
  const { status } = await statusOf(t, port, renewed.certPem);
  t.match(status.readiness, { ready: false, certificateRefused: false, reason: 'no answer (ECONNREFUSED)' });
});

t.test('a file whose chain vouches for the served certificate is still refused when it is another leaf, and named so', async (t) => {
  // The CA in the file makes the served chain verify; only the pin to the installed leaf refuses it.
  const { status, text } = await statusOf(t, await readyzServer(t, expiresIn3Days), `${renewed.certPem}${ca.certPem}`);
  t.match(status.readiness, { ready: false, certificateRefused: true });
  t.match(text, /^readiness: +UNKNOWN: the node serves another certificate than \/opt\/zenova-node\/etc\/tls-cert\.pem: reload node-edge/m);
});

t.test('an untrusted issuer names the certificate file the probe trusts', async (t) => {
  const text = certificateRefusal('UNABLE_TO_GET_ISSUER_CERT_LOCALLY', { file: CERT_FILE, certPem: renewed.certPem }, undefined);
  t.equal(text, `the node's certificate has an issuer the probe does not trust (UNABLE_TO_GET_ISSUER_CERT_LOCALLY); it trusts only ${CERT_FILE} (the certificate and the intermediates after it)`);
});

t.test('a certificate file that holds no certificate is UNKNOWN naming the file and the setting, not a node that gave no answer', async (t) => {
  const port = await readyzServer(t, renewed);
  const { status, text } = await statusOf(t, port, 'not a certificate\n');
  t.match(status.readiness, { url: null, ready: false, certificateRefused: false, reason: /tls-cert\.pem \(ZENOVA_NODE_TLS_CERT_FILE\) cannot be read as one: .*fix the file or the setting/ });
  t.match(text, /^readiness: +UNKNOWN: the node's TLS certificate .*tls-cert\.pem/m);
  t.notMatch(text, /no answer/);
});
