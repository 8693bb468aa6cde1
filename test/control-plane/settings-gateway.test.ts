import path from 'node:path';
import t from 'tap';
import { SettingsError, loadSettings, settingsVariables } from '../../control-plane/src/settings.js';

const VALID = {
  ZENOVA_DATABASE_URL: 'postgres://zenova@db.internal:5432/zenova',
  ZENOVA_ADMIN_TOKEN: 'T'.repeat(40),
};

function problemsOf(env: NodeJS.ProcessEnv): readonly string[] {
  try {
    loadSettings({ ...VALID, ...env });
  } catch (err) {
    if (err instanceof SettingsError) return err.problems;
    throw err;
  }
  throw new Error('expected loadSettings to throw SettingsError');
}

t.test('gateway, node and fault settings default to the documented values', async (t) => {
  const s = loadSettings(VALID);
  t.equal(s.tls, undefined, 'plain HTTP unless both TLS files are set');
  t.same(s.gateway.listen, { host: '0.0.0.0', port: 8443 });
  t.same(s.gateway.hosts, ['localhost', '127.0.0.1']);
  t.equal(s.gateway.publicAddress, undefined);
  t.equal(s.gateway.tlsDir, path.resolve('.zenova-data/gateway-tls'));
  t.equal(s.gateway.autoGenerate, true);
  t.equal(s.gateway.certFile, undefined);
  t.equal(s.gateway.trustBundleFile, undefined);
  t.same(s.nodes, {
    offlineAfterMs: 120_000,
    credentialValidityMs: 30 * 86_400_000,
    credentialRotateAfterMs: 86_400_000,
    credentialHandoverMs: 3_600_000,
    heartbeatIntervalMs: 5_000,
    installTokenTtlMs: 86_400_000,
    enrollAttemptsPerMinute: 10,
  });
  t.same(s.faults, { dropRotationReplies: 0 });
});

t.test('every new variable is parsed when set', async (t) => {
  const s = loadSettings({
    ...VALID,
    ZENOVA_TLS_CERT_FILE: '/etc/zenova/console.crt',
    ZENOVA_TLS_KEY_FILE: 'console.key',
    ZENOVA_GATEWAY_LISTEN: '127.0.0.1:0',
    ZENOVA_GATEWAY_HOSTS: ' GW.Example.com, 10.0.0.5 ,::1',
    ZENOVA_GATEWAY_PUBLIC_ADDRESS: 'gw.example.com:443',
    ZENOVA_GATEWAY_TLS_DIR: '/var/lib/zenova/gateway-tls',
    ZENOVA_NODE_OFFLINE_AFTER_SECONDS: '1.5',
    ZENOVA_CREDENTIAL_VALIDITY_SECONDS: '10',
    ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS: '0',
    ZENOVA_CREDENTIAL_HANDOVER_SECONDS: '2',
    ZENOVA_HEARTBEAT_INTERVAL_MS: '100',
    ZENOVA_INSTALL_TOKEN_TTL_SECONDS: '60',
    ZENOVA_ENROLL_ATTEMPTS_PER_MINUTE: '3',
    ZENOVA_FAULT_DROP_ROTATION_REPLIES: '1',
  });
  t.same(s.tls, { certFile: '/etc/zenova/console.crt', keyFile: path.resolve('console.key') }, 'relative paths resolve against the working directory');
  t.same(s.gateway.listen, { host: '127.0.0.1', port: 0 });
  t.same(s.gateway.hosts, ['gw.example.com', '10.0.0.5', '::1'], 'trimmed and lower-cased');
  t.equal(s.gateway.publicAddress, 'gw.example.com:443');
  t.equal(s.gateway.tlsDir, '/var/lib/zenova/gateway-tls');
  t.same(s.nodes, {
    offlineAfterMs: 1_500,
    credentialValidityMs: 10_000,
    credentialRotateAfterMs: 0,
    credentialHandoverMs: 2_000,
    heartbeatIntervalMs: 100,
    installTokenTtlMs: 60_000,
    enrollAttemptsPerMinute: 3,
  });
  t.same(s.faults, { dropRotationReplies: 1 });
});

t.test('an external gateway certificate turns auto-generation off and takes a trust bundle', async (t) => {
  const s = loadSettings({
    ...VALID,
    ZENOVA_GATEWAY_CERT_FILE: '/etc/zenova/gw.crt',
    ZENOVA_GATEWAY_KEY_FILE: '/etc/zenova/gw.key',
    ZENOVA_GATEWAY_TRUST_BUNDLE: '/etc/zenova/gw-ca.pem',
  });
  t.equal(s.gateway.autoGenerate, false);
  t.equal(s.gateway.certFile, '/etc/zenova/gw.crt');
  t.equal(s.gateway.keyFile, '/etc/zenova/gw.key');
  t.equal(s.gateway.trustBundleFile, '/etc/zenova/gw-ca.pem');
  t.equal(loadSettings({ ...VALID, ZENOVA_GATEWAY_TLS_AUTO_GENERATE: 'false' }).gateway.autoGenerate, false, 'can be turned off explicitly');
});

t.test('TLS files come in pairs: one without the other names the missing variable', async (t) => {
  t.match(problemsOf({ ZENOVA_TLS_CERT_FILE: '/a.crt' }), [/^ZENOVA_TLS_KEY_FILE: is required together with ZENOVA_TLS_CERT_FILE/]);
  t.match(problemsOf({ ZENOVA_TLS_KEY_FILE: '/a.key' }), [/^ZENOVA_TLS_CERT_FILE: is required together with ZENOVA_TLS_KEY_FILE/]);
  t.match(problemsOf({ ZENOVA_GATEWAY_CERT_FILE: '/g.crt' }), [/^ZENOVA_GATEWAY_KEY_FILE: is required together with ZENOVA_GATEWAY_CERT_FILE/]);
});

t.test('contradictory gateway settings are refused naming the variable to change', async (t) => {
  t.match(problemsOf({ ZENOVA_GATEWAY_CERT_FILE: '/g.crt', ZENOVA_GATEWAY_KEY_FILE: '/g.key', ZENOVA_GATEWAY_TLS_AUTO_GENERATE: 'true' }),
    [/^ZENOVA_GATEWAY_TLS_AUTO_GENERATE: cannot be true with ZENOVA_GATEWAY_CERT_FILE set/]);
  t.match(problemsOf({ ZENOVA_GATEWAY_TRUST_BUNDLE: '/ca.pem' }), [/^ZENOVA_GATEWAY_TRUST_BUNDLE: is only used with an external certificate/]);
  t.match(problemsOf({ ZENOVA_GATEWAY_PUBLIC_ADDRESS: 'gw.example.com:8443' }),
    [/^ZENOVA_GATEWAY_PUBLIC_ADDRESS: host 'gw.example.com' must be one of ZENOVA_GATEWAY_HOSTS/]);
});

t.test('a rotation age set above half the credential validity is refused naming both variables and their values', async (t) => {
  t.match(problemsOf({ ZENOVA_CREDENTIAL_VALIDITY_SECONDS: '43200', ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS: '86400' }),
    [/^ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS: 86400 must be at most half of ZENOVA_CREDENTIAL_VALIDITY_SECONDS 43200 \(at most 21600\)/]);
  t.match(problemsOf({ ZENOVA_CREDENTIAL_VALIDITY_SECONDS: '100', ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS: '50.5' }),
    [/^ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS: 50\.5 must be at most half of ZENOVA_CREDENTIAL_VALIDITY_SECONDS 100 \(at most 50\)/]);
  t.equal(loadSettings({ ...VALID, ZENOVA_CREDENTIAL_VALIDITY_SECONDS: '172800' }).nodes.credentialRotateAfterMs, 86_400_000, 'exactly half is accepted');
});

t.test('a heartbeat interval set above half the offline timeout is refused naming both variables; the node heartbeats at least every 10 minutes', async (t) => {
  t.match(problemsOf({ ZENOVA_HEARTBEAT_INTERVAL_MS: '300000' }),
    [/^ZENOVA_HEARTBEAT_INTERVAL_MS: 300000 must be at most half of ZENOVA_NODE_OFFLINE_AFTER_SECONDS 120 \(at most 60000 ms\), or healthy nodes are shown offline between heartbeats/]);
  t.match(problemsOf({ ZENOVA_HEARTBEAT_INTERVAL_MS: '5000', ZENOVA_NODE_OFFLINE_AFTER_SECONDS: '2' }),
    [/^ZENOVA_HEARTBEAT_INTERVAL_MS: 5000 must be at most half of ZENOVA_NODE_OFFLINE_AFTER_SECONDS 2 \(at most 1000 ms\)/]);
  t.equal(loadSettings({ ...VALID, ZENOVA_HEARTBEAT_INTERVAL_MS: '60000' }).nodes.heartbeatIntervalMs, 60_000, 'exactly half is accepted');
  t.equal(loadSettings({ ...VALID, ZENOVA_HEARTBEAT_INTERVAL_MS: '900000', ZENOVA_NODE_OFFLINE_AFTER_SECONDS: '1200' }).nodes.heartbeatIntervalMs, 900_000,
    'past the node\'s 10-minute cap it is judged at the cap, as it was accepted before');
  t.match(settingsVariables.find((v) => v.name === 'ZENOVA_HEARTBEAT_INTERVAL_MS')?.description, /at most half of ZENOVA_NODE_OFFLINE_AFTER_SECONDS.*a node heartbeats at least every 10 min/);
});

t.test('an unset heartbeat interval is 5 s, or half the offline timeout when that is shorter, so a short offline timeout set on its own still starts', async (t) => {
  t.equal(loadSettings(VALID).nodes.heartbeatIntervalMs, 5000);
  t.equal(loadSettings({ ...VALID, ZENOVA_NODE_OFFLINE_AFTER_SECONDS: '9' }).nodes.heartbeatIntervalMs, 4500);
  t.equal(loadSettings({ ...VALID, ZENOVA_NODE_OFFLINE_AFTER_SECONDS: '1.5' }).nodes.heartbeatIntervalMs, 750);
});

t.test('an unset rotation age is a day, or half the validity when that is shorter, so a shorter validity set on its own still starts', async (t) => {
  t.equal(loadSettings({ ...VALID, ZENOVA_CREDENTIAL_VALIDITY_SECONDS: '43200' }).nodes.credentialRotateAfterMs, 21_600_000);
  t.equal(loadSettings({ ...VALID, ZENOVA_CREDENTIAL_VALIDITY_SECONDS: '7' }).nodes.credentialRotateAfterMs, 3_500);
  t.equal(loadSettings(VALID).nodes.credentialRotateAfterMs, 86_400_000);
  t.equal(loadSettings({ ...VALID, ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS: '0' }).nodes.credentialRotateAfterMs, 0, 'an explicit 0 is kept');
});

t.test('each malformed new variable is reported with its name, the rule and the value', async (t) => {
  const problems = problemsOf({
    ZENOVA_GATEWAY_LISTEN: '8443',
    ZENOVA_GATEWAY_HOSTS: 'https://gw.example.com',
    ZENOVA_GATEWAY_PUBLIC_ADDRESS: 'gw.example.com',
    ZENOVA_GATEWAY_TLS_AUTO_GENERATE: 'maybe',
    ZENOVA_NODE_OFFLINE_AFTER_SECONDS: '0',
    ZENOVA_CREDENTIAL_VALIDITY_SECONDS: 'ten',
    ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS: '-1',
    ZENOVA_CREDENTIAL_HANDOVER_SECONDS: '1e3',
    ZENOVA_HEARTBEAT_INTERVAL_MS: '99',
    ZENOVA_INSTALL_TOKEN_TTL_SECONDS: '0',
    ZENOVA_ENROLL_ATTEMPTS_PER_MINUTE: '0',
    ZENOVA_FAULT_DROP_ROTATION_REPLIES: '1.5',
  });
  t.same(problems.map((p) => p.split(':')[0]), [
    'ZENOVA_GATEWAY_LISTEN', 'ZENOVA_GATEWAY_HOSTS', 'ZENOVA_GATEWAY_PUBLIC_ADDRESS', 'ZENOVA_GATEWAY_TLS_AUTO_GENERATE',
    'ZENOVA_NODE_OFFLINE_AFTER_SECONDS', 'ZENOVA_CREDENTIAL_VALIDITY_SECONDS', 'ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS',
    'ZENOVA_CREDENTIAL_HANDOVER_SECONDS', 'ZENOVA_HEARTBEAT_INTERVAL_MS', 'ZENOVA_INSTALL_TOKEN_TTL_SECONDS',
    'ZENOVA_ENROLL_ATTEMPTS_PER_MINUTE', 'ZENOVA_FAULT_DROP_ROTATION_REPLIES',
  ]);
  t.match(problems[0], /expected HOST:PORT.*got '8443'/);
  t.match(problems[1], /without scheme or port, got 'https:\/\/gw\.example\.com'/);
  t.match(problems[3], /expected true or false, got 'maybe'/);
  t.match(problems[4], /from 1 to .*got '0'/);
  t.match(problems[8], /from 100 to .*got '99'/);
});

t.test('a gateway host list that is empty or holds a port is refused', async (t) => {
  t.match(problemsOf({ ZENOVA_GATEWAY_HOSTS: ' , ' }), [/^ZENOVA_GATEWAY_HOSTS: expected at least one/]);
  t.match(problemsOf({ ZENOVA_GATEWAY_HOSTS: 'gw.example.com:8443' }), [/^ZENOVA_GATEWAY_HOSTS: .*got 'gw\.example\.com:8443'/]);
  t.match(problemsOf({ ZENOVA_GATEWAY_HOSTS: '*.example.com' }), [/^ZENOVA_GATEWAY_HOSTS: /], 'no wildcards');
});

t.test('an IPv6 public address in brackets is accepted when its host is listed', async (t) => {
  const s = loadSettings({ ...VALID, ZENOVA_GATEWAY_HOSTS: '::1', ZENOVA_GATEWAY_PUBLIC_ADDRESS: '[::1]:9443' });
  t.equal(s.gateway.publicAddress, '[::1]:9443');
});

t.test('--help says to set ZENOVA_GATEWAY_HOSTS before the first start, and what changing it later costs', async (t) => {
  t.match(settingsVariables.find((v) => v.name === 'ZENOVA_GATEWAY_HOSTS')?.description,
    /Set it before the first start: a generated certificate is never reissued, so covering another host later means replacing the identity \(delete from gateway_tls_identity, remove ZENOVA_GATEWAY_TLS_DIR\) and re-enrolling every node/);
});

t.test('--help documents every variable the settings read', async (t) => {
  const documented = settingsVariables.map((v) => v.name);
  for (const name of [
    'ZENOVA_TLS_CERT_FILE', 'ZENOVA_TLS_KEY_FILE', 'ZENOVA_GATEWAY_LISTEN', 'ZENOVA_GATEWAY_HOSTS', 'ZENOVA_GATEWAY_PUBLIC_ADDRESS',
    'ZENOVA_GATEWAY_TLS_DIR', 'ZENOVA_GATEWAY_TLS_AUTO_GENERATE', 'ZENOVA_GATEWAY_CERT_FILE', 'ZENOVA_GATEWAY_KEY_FILE',
    'ZENOVA_GATEWAY_TRUST_BUNDLE', 'ZENOVA_NODE_OFFLINE_AFTER_SECONDS', 'ZENOVA_CREDENTIAL_VALIDITY_SECONDS',
    'ZENOVA_CREDENTIAL_ROTATE_AFTER_SECONDS', 'ZENOVA_CREDENTIAL_HANDOVER_SECONDS', 'ZENOVA_HEARTBEAT_INTERVAL_MS',
    'ZENOVA_INSTALL_TOKEN_TTL_SECONDS', 'ZENOVA_ENROLL_ATTEMPTS_PER_MINUTE', 'ZENOVA_FAULT_DROP_ROTATION_REPLIES',
    'ZENOVA_LEASE_CAP_MICROS', 'ZENOVA_LEASE_SHARE', 'ZENOVA_LEASE_REFRESH_MS',
  ]) {
    t.ok(documented.includes(name as (typeof documented)[number]), `${name} is documented`);
  }
});
