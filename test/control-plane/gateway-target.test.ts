import t from 'tap';
import { gatewayTarget, loopbackTargetWarning } from '../../control-plane/src/gateway/gateway-target.js';
import { loadSettings } from '../../control-plane/src/settings.js';

const STORED_IDENTITY = ['database', { hosts: ['localhost', '127.0.0.1'], tlsDir: '/var/lib/zenova/gateway-tls' }] as const;

const VALID = {
  ZENOVA_DATABASE_URL: 'postgres://zenova@db.internal:5432/zenova',
  ZENOVA_ADMIN_TOKEN: 'T'.repeat(40),
};

t.test('with the default gateway hosts nodes are told to dial localhost, and start-up warns that only this host can', async (t) => {
  const target = gatewayTarget(loadSettings(VALID), 8443);
  t.same(target, { target: 'localhost:8443', serverName: 'localhost' });
  t.match(loopbackTargetWarning(target, ...STORED_IDENTITY), /dial the node gateway at localhost:8443, a loopback address: only a node on this host can reach it.*ZENOVA_GATEWAY_HOSTS/);
});

t.test('loopback addresses in any form are warned about; names and addresses other hosts reach are not', async (t) => {
  for (const hosts of ['127.0.0.1', '::1', 'LOCALHOST,gw.example.com']) {
    t.ok(loopbackTargetWarning(gatewayTarget(loadSettings({ ...VALID, ZENOVA_GATEWAY_HOSTS: hosts }), 8443), ...STORED_IDENTITY), hosts);
  }
  for (const hosts of ['gw.example.com,localhost', '10.0.0.5']) {
    t.equal(loopbackTargetWarning(gatewayTarget(loadSettings({ ...VALID, ZENOVA_GATEWAY_HOSTS: hosts }), 8443), ...STORED_IDENTITY), undefined, hosts);
  }
  const published = gatewayTarget(loadSettings({ ...VALID, ZENOVA_GATEWAY_HOSTS: 'localhost,gw.example.com', ZENOVA_GATEWAY_PUBLIC_ADDRESS: 'gw.example.com:443' }), 8443);
  t.same(published, { target: 'gw.example.com:443', serverName: 'gw.example.com' });
  t.equal(loopbackTargetWarning(published, ...STORED_IDENTITY), undefined, 'the published address is what nodes dial');
});

t.test('the loopback warning says what taking another host costs, by where the identity came from', async (t) => {
  const target = gatewayTarget(loadSettings(VALID), 8443);
  const gateway = { hosts: ['localhost', '127.0.0.1'], tlsDir: '/var/lib/zenova/gateway-tls' };
  t.match(loopbackTargetWarning(target, 'generated', gateway),
    /generated on this start for localhost,127\.0\.0\.1 and is never reissued, so for nodes on other hosts, before enrolling any node: stop the control plane, delete the identity \(psql: delete from gateway_tls_identity\) and remove \/var\/lib\/zenova\/gateway-tls, then start again with ZENOVA_GATEWAY_HOSTS/);
  for (const source of ['database', 'cache'] as const) {
    t.match(loopbackTargetWarning(target, source, gateway),
      /covers only the hosts it was generated for and is never reissued: .*delete from gateway_tls_identity.*every node already enrolled must be re-enrolled/, source);
  }
  t.match(loopbackTargetWarning(target, 'external', gateway), /install a certificate \(ZENOVA_GATEWAY_CERT_FILE\) that also names a host they reach/);
});

t.test('when the certificate already names a host others reach, the loopback warning says to dial that one, never to replace the identity', async (t) => {
  const settings = loadSettings({ ...VALID, ZENOVA_GATEWAY_HOSTS: 'localhost,gw.example.com' });
  const gateway = { hosts: settings.gateway.hosts, tlsDir: '/var/lib/zenova/gateway-tls' };
  for (const source of ['generated', 'database', 'cache', 'external'] as const) {
    const warning = loopbackTargetWarning(gatewayTarget(settings, 8443), source, gateway);
    t.match(warning, /list gw\.example\.com first in ZENOVA_GATEWAY_HOSTS, or set ZENOVA_GATEWAY_PUBLIC_ADDRESS to gw\.example\.com:PORT/, source);
    t.notMatch(warning, /delete|install a certificate|must be re-enrolled/, source);
  }
});
