import { X509Certificate } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import tls from 'node:tls';
import t from 'tap';
import {
  certCovers, certNotAfter, createCa, isIssuedBy, issueServerCert, keyMatchesCert, sanFor, splitPemCertificates,
} from '../../control-plane/src/tls/self-signed.js';

const DAY_MS = 86_400_000;

/** A TLS handshake against a real server on 127.0.0.1; resolves with the outcome, never throws. */
async function handshake(
  t: { teardown(fn: () => unknown): void },
  server: { certPem: string; keyPem: string },
  client: { ca: string; servername: string },
): Promise<{ authorized: boolean; error?: string }> {
  const srv = tls.createServer({ cert: server.certPem, key: server.keyPem }, (socket) => socket.end());
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise((resolve) => srv.close(resolve)));
  const { port } = srv.address() as AddressInfo;
  return new Promise((resolve) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca: client.ca, servername: client.servername });
    socket.once('secureConnect', () => {
      resolve({ authorized: socket.authorized });
      socket.destroy();
    });
    socket.once('error', (err) => resolve({ authorized: false, error: err.message }));
  });
}

t.test('a server certificate from createCa/issueServerCert verifies with node:tls against the CA', async (t) => {
  const ca = await createCa('Zenova Test CA, with a comma');
  const server = await issueServerCert(ca, { dnsNames: ['localhost', 'gw.example.com'], ipAddresses: ['127.0.0.1'], validityDays: 30 });
  t.same(await handshake(t, server, { ca: ca.certPem, servername: 'localhost' }), { authorized: true });
  t.same(await handshake(t, server, { ca: ca.certPem, servername: 'gw.example.com' }), { authorized: true });
  const wrongName = await handshake(t, server, { ca: ca.certPem, servername: 'other.example.com' });
  t.match(wrongName.error, /Hostname\/IP does not match/, 'a name outside the SAN is refused');
  const otherCa = await createCa('Another CA');
  const wrongCa = await handshake(t, server, { ca: otherCa.certPem, servername: 'localhost' });
  t.match(wrongCa.error, /self[- ]signed|unable to verify|certificate/i, 'another CA does not verify it');
});

t.test('the CA is a ten-year CA and the server certificate never outlives it', async (t) => {
  const ca = await createCa('Zenova Test CA');
  const caCert = new X509Certificate(ca.certPem);
  t.ok(caCert.ca, 'basic constraints: CA');
  const years = (certNotAfter(ca.certPem).getTime() - Date.now()) / (365 * DAY_MS);
  t.ok(years > 9.9 && years < 10.1, `about ten years (${years.toFixed(2)})`);
  const server = await issueServerCert(ca, { dnsNames: ['localhost'], validityDays: 20 * 365 });
  t.ok(certNotAfter(server.certPem).getTime() <= certNotAfter(ca.certPem).getTime());
  t.notOk(new X509Certificate(server.certPem).ca, 'the server certificate is not a CA');
});

t.test('certCovers reads the SAN for DNS names and IPv4/IPv6 addresses', async (t) => {
  const ca = await createCa('Zenova Test CA');
  const server = await issueServerCert(ca, { ...sanFor(['localhost', '127.0.0.1', '::1']), validityDays: 1 });
  t.ok(certCovers(server.certPem, 'localhost'));
  t.ok(certCovers(server.certPem, 'LOCALHOST'), 'DNS names compare case-insensitively');
  t.ok(certCovers(server.certPem, '127.0.0.1'));
  t.ok(certCovers(server.certPem, '::1'));
  t.notOk(certCovers(server.certPem, '10.0.0.1'));
  t.notOk(certCovers(server.certPem, 'gw.example.com'));
});

t.test('keyMatchesCert, isIssuedBy and splitPemCertificates tell certificates and keys apart', async (t) => {
  const ca = await createCa('CA one');
  const other = await createCa('CA two');
  const server = await issueServerCert(ca, { dnsNames: ['localhost'], validityDays: 1 });
  t.ok(keyMatchesCert(server.certPem, server.keyPem));
  t.notOk(keyMatchesCert(server.certPem, ca.keyPem));
  t.ok(isIssuedBy(server.certPem, ca.certPem));
  t.notOk(isIssuedBy(server.certPem, other.certPem));
  t.equal(splitPemCertificates(`${server.certPem}\n${ca.certPem}`).length, 2);
  t.same(splitPemCertificates('no pem here'), []);
});

t.test('issuedAt back-dates a certificate so tests can build expired ones', async (t) => {
  const ca = await createCa('Old CA', { issuedAt: new Date(Date.now() - 10 * DAY_MS) });
  const server = await issueServerCert(ca, { dnsNames: ['localhost'], validityDays: 1, issuedAt: new Date(Date.now() - 5 * DAY_MS) });
  t.ok(certNotAfter(server.certPem).getTime() < Date.now());
});

t.test('a server certificate without names or with a bad IP is refused', async (t) => {
  const ca = await createCa('CA');
  await t.rejects(issueServerCert(ca, { validityDays: 1 }), /at least one DNS name or IP address/);
  await t.rejects(issueServerCert(ca, { ipAddresses: ['localhost'], validityDays: 1 }), /'localhost' is not an IP address/);
});
