/**
 * External gateway certificate without ZENOVA_GATEWAY_TRUST_BUNDLE, end to end with real processes:
 * the control plane pins no CA, `zenova-node enroll` saves an identity that uses the system trust
 * store, and `serve` connects to a gateway whose CA the node host trusts (NODE_EXTRA_CA_CERTS).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';
import { waitFor } from '../fixtures/wait-for.js';
import { createNode, httpsMaterial, nodeView, runEnroll, startControlPlane, startNodeServe, tempDir, tokenOf } from './stack.js';

t.test('a node enrolled against an external gateway certificate without a trust bundle verifies the gateway with its system trust store and goes online', async (t) => {
  const db = await testDatabase(t);
  const work = tempDir(t, 'zn-e2e-system-trust-');
  const https = await httpsMaterial(join(work, 'https'));
  // A private CA the control plane does not hand out: the node host must trust it on its own.
  const gatewayCa = await createTestCa('Zenova E2E Host-Trusted Gateway CA');
  const gatewayCert = await issueServerCert(gatewayCa, { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
  const files = { cert: join(work, 'gw.crt'), key: join(work, 'gw.key'), hostRoots: join(work, 'host-roots.pem') };
  writeFileSync(files.cert, gatewayCert.certPem);
  writeFileSync(files.key, gatewayCert.keyPem, { mode: 0o600 });
  writeFileSync(files.hostRoots, gatewayCa.certPem);
  const cp = await startControlPlane(t, {
    db,
    https,
    gatewayTlsDir: join(work, 'gateway-tls'),
    env: { ZENOVA_GATEWAY_CERT_FILE: files.cert, ZENOVA_GATEWAY_KEY_FILE: files.key },
  });

  const created = await createNode(cp, 'branch-st');
  const stateDir = join(work, 'branch-st-state');
  const enrolled = await runEnroll(t, { url: cp.url, token: tokenOf(created.install.command), stateDir, caFile: https.caFile });
  t.equal(enrolled.code, 0, enrolled.output);
  const identity = JSON.parse(readFileSync(join(stateDir, 'identity.json'), 'utf8')) as { gateway: Record<string, unknown> };
  t.notOk('caPem' in identity.gateway, 'no gateway CA pinned');

  const node = await startNodeServe(t, { stateDir, env: { NODE_EXTRA_CA_CERTS: files.hostRoots } });
  await node.proc.waitForLine(/"msg":"control session established"/, 30_000);
  await waitFor(async () => ((await nodeView(cp, 'branch-st')).status === 'online' ? true : undefined), { what: 'branch-st online', timeoutMs: 30_000 });
});
