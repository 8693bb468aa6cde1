// `zenova gateway-node` against a control plane serving HTTPS: verified with ZENOVA_CA_FILE or the
// default trust store, never skipped; each kind of TLS failure explained in one line.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { writeFileSync } from 'node:fs';
import t from 'tap';
import { createTestCa, issueServerCert } from '../fixtures/tls.js';
import { ADMIN_TOKEN, startControlPlane, tempDir, zenova, zenovaProcess } from './gateway-node-harness.js';

const ca = await createTestCa();
const otherCa = await createTestCa();
const cp = await startControlPlane(t, { tls: await issueServerCert(ca, { ipAddresses: ['127.0.0.1'] }) });
const port = new URL(cp.url).port;
const cwd = tempDir(t);
const caFile = path.join(cwd, 'cp-ca.pem');
writeFileSync(caFile, ca.certPem);
const otherCaFile = path.join(cwd, 'other-ca.pem');
writeFileSync(otherCaFile, otherCa.certPem);
const httpsUrl = `https://127.0.0.1:${port}`;
const base = { ZENOVA_CONTROL_PLANE_URL: httpsUrl, ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN };

t.test('the control plane in this test serves HTTPS', async (t) => {
  t.equal(cp.url, httpsUrl);
});

t.test('with ZENOVA_CA_FILE the CLI verifies the control plane and works; the default callback URL is accepted', async (t) => {
  const env = { ...base, ZENOVA_CA_FILE: caFile };
  const created = await zenova(['gateway-node', 'create', '--name', 'edge-tls', '--address', '10.0.0.1', '--json'], { env, cwd });
  t.equal(created.code, 0, 'exits 0', { stderr: created.stderr });
  const body = JSON.parse(created.stdout);
  t.equal(body.node.controlPlaneUrl, httpsUrl, 'ZENOVA_CONTROL_PLANE_URL is the node\'s callback URL by default');
  t.match(body.install.command, ` --control-plane ${httpsUrl} --token-file -`);
  const listed = await zenova(['gateway-node', 'list'], { env, cwd });
  t.equal(listed.code, 0, 'exits 0', { stderr: listed.stderr });
  t.match(listed.stdout, /^edge-tls\s+pending/m);

  const warnings = created.stderr.trimEnd().split('\n');
  t.equal(warnings.length, 2, 'two warnings, on stderr (stdout stays the JSON answer)');
  t.match(warnings[0], `warning: node edge-tls will call the control plane back at ${httpsUrl} (ZENOVA_CONTROL_PLANE_URL), a loopback address`);
  t.match(warnings[1], `warning: node edge-tls gets no CA, yet this CLI trusts the control plane only through ZENOVA_CA_FILE (${caFile})`);
});

t.test('create warns of neither when the callback URL is given and the node gets the CA', async (t) => {
  const env = { ...base, ZENOVA_CA_FILE: caFile };
  const created = await zenova(['gateway-node', 'create', '--name', 'edge-tls-ca', '--address', '10.0.0.2', '--control-plane-url', 'https://cp.zenova.test:7400', '--ca-file', caFile], { env, cwd });
  t.equal(created.code, 0, 'exits 0', { stderr: created.stderr });
  t.equal(created.stderr, '');
});

t.test('without a CA file the self-signed certificate is refused in one line, exit 1', async (t) => {
  const result = await zenova(['gateway-node', 'list'], { env: base, cwd });
  t.equal(result.code, 1);
  t.match(result.stderr, new RegExp(`^zenova: TLS verification of the control plane at ${httpsUrl} failed: its certificate is not trusted \\([A-Z_]+\\); set ZENOVA_CA_FILE to the PEM file of the CA that issued it\\n$`));
});

t.test('NODE_TLS_REJECT_UNAUTHORIZED=0 in the shell does not switch verification off', async (t) => {
  const result = await zenovaProcess(t, ['gateway-node', 'list'], { env: { ...base, NODE_TLS_REJECT_UNAUTHORIZED: '0' }, cwd });
  t.equal(result.code, 1);
  t.match(result.output, /TLS verification of the control plane at .* failed: its certificate is not trusted/);
});

t.test('the wrong CA file is refused and named', async (t) => {
  const result = await zenova(['gateway-node', 'list'], { env: { ...base, ZENOVA_CA_FILE: otherCaFile }, cwd });
  t.equal(result.code, 1);
  t.match(result.stderr, `it is not issued by the CA in ZENOVA_CA_FILE (${otherCaFile})`);
  t.equal(result.stderr.trimEnd().split('\n').length, 1, 'one line');
});

t.test('a host name the certificate does not cover is refused and named', async (t) => {
  const result = await zenova(['gateway-node', 'list'], { env: { ...base, ZENOVA_CONTROL_PLANE_URL: `https://localhost:${port}`, ZENOVA_CA_FILE: caFile }, cwd });
  t.equal(result.code, 1);
  t.match(result.stderr, /^zenova: TLS verification of the control plane at https:\/\/localhost:\d+ failed: its certificate is not valid for localhost;/);
});

t.test('plain http:// to the HTTPS port says to use https://', async (t) => {
  const result = await zenova(['gateway-node', 'list'], { env: { ...base, ZENOVA_CONTROL_PLANE_URL: `http://127.0.0.1:${port}` }, cwd });
  t.equal(result.code, 1);
  t.match(result.stderr, /https:\/\//);
  t.equal(result.stderr.trimEnd().split('\n').length, 1, 'one line');
});

t.test('https:// to a plain HTTP port says it does not answer HTTPS', async (t) => {
  const server = http.createServer((_req, res) => res.end('plain'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const plainPort = (server.address() as AddressInfo).port;
  const result = await zenova(['gateway-node', 'list'], { env: { ...base, ZENOVA_CONTROL_PLANE_URL: `https://127.0.0.1:${plainPort}`, ZENOVA_CA_FILE: caFile }, cwd });
  t.equal(result.code, 1);
  t.match(result.stderr, /does not answer HTTPS on that port/);
});

t.test('a ZENOVA_CA_FILE that is not a certificate is a usage error', async (t) => {
  const junk = path.join(cwd, 'junk.pem');
  writeFileSync(junk, 'not a certificate\n');
  const result = await zenova(['gateway-node', 'list'], { env: { ...base, ZENOVA_CA_FILE: junk }, cwd });
  t.equal(result.code, 2);
  t.match(result.stderr, `ZENOVA_CA_FILE ${junk} (from the environment) is not a PEM certificate`);
});
