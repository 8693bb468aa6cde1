import t from 'tap';
import { gatewayTarget, loopbackTargetWarning } from '../../control-plane/src/gateway/gateway-target.js';
import { loadSettings } from '../../control-plane/src/settings.js';

const VALID = {
  ZENOVA_DATABASE_URL: 'postgres://zenova@db.internal:5432/zenova',
  ZENOVA_ADMIN_TOKEN: 'T'.repeat(40),
};

t.test('with the default gateway hosts nodes are told to dial localhost, and start-up warns that only this host can', async (t) => {
  const target = gatewayTarget(loadSettings(VALID), 8443);
  t.same(target, { target: 'localhost:8443', serverName: 'localhost' });
  t.match(loopbackTargetWarning(target), /dial the node gateway at localhost:8443, a loopback address: only a node on this host can reach it.*ZENOVA_GATEWAY_HOSTS/);
});

t.test('loopback addresses in any form are warned about; names and addresses other hosts reach are not', async (t) => {
  for (const hosts of ['127.0.0.1', '::1', 'LOCALHOST,gw.example.com']) {
    t.ok(loopbackTargetWarning(gatewayTarget(loadSettings({ ...VALID, ZENOVA_GATEWAY_HOSTS: hosts }), 8443)), hosts);
  }
  for (const hosts of ['gw.example.com,localhost', '10.0.0.5']) {
    t.equal(loopbackTargetWarning(gatewayTarget(loadSettings({ ...VALID, ZENOVA_GATEWAY_HOSTS: hosts }), 8443)), undefined, hosts);
  }
  const published = gatewayTarget(loadSettings({ ...VALID, ZENOVA_GATEWAY_HOSTS: 'localhost,gw.example.com', ZENOVA_GATEWAY_PUBLIC_ADDRESS: 'gw.example.com:443' }), 8443);
  t.same(published, { target: 'gw.example.com:443', serverName: 'gw.example.com' });
  t.equal(loopbackTargetWarning(published), undefined, 'the published address is what nodes dial');
});
