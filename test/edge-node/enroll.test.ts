// `zenova-node enroll` against a real HTTPS control plane stand-in (throwaway CA): verified TLS,
// preflight, token redemption, clear errors per token code, and identity + credential saved 0600.
import { randomUUID } from 'node:crypto';
import { chmod, readFile, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { PROTOCOL_VERSION } from '../../proto/src/index.js';
import { runNodeCli as run } from './cli-capture.js';
import { createTestCa } from '../fixtures/tls.js';
import { preflightAnswer, startEnrollServer, tokenErrorAnswer } from './enroll-fixtures.js';
import type { EnrollServer } from './enroll-fixtures.js';

const TOKEN = 'zn_it_Q2hlY2tUaGVUb2tlbk5ldmVyQXBwZWFyc0luT3V0cHV0MDEyMw';

async function caFile(dir: string, server: EnrollServer): Promise<string> {
  const file = path.join(dir, 'zenova-control-plane-ca.pem');
  await writeFile(file, server.ca.certPem);
  return file;
}

const mode = async (file: string): Promise<number> => (await stat(file)).mode & 0o777;
const exists = (file: string): Promise<boolean> => stat(file).then(() => true, () => false);

t.test('enrolling saves identity and credential 0600 in a 0700 state dir and prints the node, never a secret', async (t) => {
  const server = await startEnrollServer(t);
  const dir = t.testdir({});
  const stateDir = path.join(dir, 'state');
  const result = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', await caFile(dir, server)]);
  t.equal(result.code, 0, result.stderr);
  t.match(result.stdout, /enrolled node edge-1 \(id [0-9a-f-]{36}\)/);
  t.match(result.stdout, `zenova-node serve --state-dir ${stateDir}`);

  const credential = server.lastCredential()!;
  for (const text of [result.stdout, result.stderr]) {
    t.notOk(text.includes(TOKEN), 'the token is not printed');
    t.notOk(text.includes(credential), 'the credential is not printed');
  }

  t.equal(await mode(stateDir), 0o700);
  for (const name of ['identity.json', 'credential.json']) t.equal(await mode(path.join(stateDir, name)), 0o600, `${name} is 0600`);
  const identity = JSON.parse(await readFile(path.join(stateDir, 'identity.json'), 'utf8'));
  t.match(identity, {
    nodeName: 'edge-1',
    controlPlaneUrl: server.url,
    controlPlaneCaPem: server.ca.certPem,
    gateway: { target: '127.0.0.1:8443', serverName: 'localhost', caPem: server.gatewayCa.certPem },
    configSigningPublicKeyPem: /BEGIN PUBLIC KEY/,
  });
  t.notOk(JSON.stringify(identity).includes(credential), 'identity.json holds no credential');
  const stored = JSON.parse(await readFile(path.join(stateDir, 'credential.json'), 'utf8'));
  t.equal(stored.current.secret, credential, 'credential.json holds the issued credential');

  t.same(server.requests.map((r) => `${r.method} ${r.path}`), ['GET /api/enroll/preflight', 'POST /api/enroll'], 'preflight first, then redemption');
  t.same(server.requests[1]?.body, {
    token: TOKEN,
    mode: 'install',
    facts: { hostname: os.hostname(), arch: process.arch, version: '0.1.0', protocolVersion: PROTOCOL_VERSION },
    redemptionKey: (server.requests[1]?.body as { redemptionKey?: string }).redemptionKey,
  });
  t.match((server.requests[1]?.body as { redemptionKey?: string }).redemptionKey, /^[A-Za-z0-9_-]{43}$/, 'with a redemption key');
});

const tokenErrors: Array<{ status: number; code: string; expect: RegExp; headers?: Record<string, string> }> = [
  { status: 401, code: 'ZN_ERR_CP_TOKEN_UNKNOWN', expect: /token is not known to this control plane.*gateway-node install-command NAME/ },
  { status: 401, code: 'ZN_ERR_CP_TOKEN_EXPIRED', expect: /token has expired.*gateway-node install-command NAME/ },
  { status: 401, code: 'ZN_ERR_CP_TOKEN_SUPERSEDED', expect: /the token was replaced by a newer command: run the newest command \(or, if it is lost, issue a new one with `zenova gateway-node install-command NAME`\)/ },
  { status: 409, code: 'ZN_ERR_CP_TOKEN_USED', expect: /the token was already used: issue a new install command with `zenova gateway-node install-command NAME`/ },
  { status: 400, code: 'ZN_ERR_CP_TOKEN_WRONG_KIND', expect: /not an install token.*--reenroll/ },
  { status: 410, code: 'ZN_ERR_CP_NODE_DELETED', expect: /node this token belongs to was deleted/ },
  { status: 400, code: 'ZN_ERR_CP_PROTOCOL_INCOMPATIBLE', expect: /another control protocol version/ },
  { status: 429, code: 'ZN_ERR_CP_ENROLL_RATE_LIMITED', expect: /too many enrollment attempts.*wait 42 s/, headers: { 'retry-after': '42' } },
];

for (const failure of tokenErrors) {
  t.test(`${failure.code} is explained in one line with advice, exit 1, nothing saved`, async (t) => {
    const server = await startEnrollServer(t, { enroll: () => tokenErrorAnswer(failure.status, failure.code, `server says ${TOKEN}`, failure.headers) });
    const dir = t.testdir({});
    const stateDir = path.join(dir, 'state');
    const result = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', await caFile(dir, server)]);
    t.equal(result.code, 1);
    t.match(result.stderr, failure.expect);
    t.match(result.stderr, failure.code, 'the code is named');
    t.equal(result.stderr.trim().split('\n').length, 1, 'one line');
    t.notOk(result.stderr.includes(TOKEN), 'the token is not printed, even when the server echoes it');
    t.notOk(await exists(path.join(stateDir, 'identity.json')), 'no identity saved');
    t.notOk(await exists(path.join(stateDir, 'credential.json')), 'no credential saved');
  });
}

t.test('a control-plane code this node has no advice for (as a newer code is to an older node) is printed with the control plane\'s own message', async (t) => {
  const message = `The token was replaced by a newer command issued at 2026-12-01T10:00:00.000Z; run the newest command. ${TOKEN}`;
  const server = await startEnrollServer(t, { enroll: () => tokenErrorAnswer(401, 'ZN_ERR_CP_TOKEN_FROM_THE_FUTURE', message) });
  const dir = t.testdir({});
  const result = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', path.join(dir, 's'), '--ca-file', await caFile(dir, server)]);
  t.equal(result.code, 1);
  t.match(result.stderr, /the control plane refused enrollment with HTTP 401 \(ZN_ERR_CP_TOKEN_FROM_THE_FUTURE: The token was replaced by a newer command issued at 2026-12-01T10:00:00\.000Z; run the newest command\. \[redacted\]\)/);
  t.equal(result.stderr.trim().split('\n').length, 1, 'one line');
  t.notOk(result.stderr.includes(TOKEN));
});

t.test('a reenroll token used twice points at the reenroll command', async (t) => {
  const server = await startEnrollServer(t, { enroll: () => tokenErrorAnswer(409, 'ZN_ERR_CP_TOKEN_USED', 'used') });
  const dir = t.testdir({});
  const result = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', path.join(dir, 's'), '--ca-file', await caFile(dir, server), '--reenroll']);
  t.equal(result.code, 1);
  t.match(result.stderr, /already used: issue a new reenroll command with `zenova gateway-node reenroll-command NAME`/);
});

t.test('a plain http:// control plane URL is refused before anything is sent, exit 2', async (t) => {
  const dir = t.testdir({});
  const result = await run(['enroll', '--control-plane', 'http://127.0.0.1:9/', '--token', TOKEN, '--state-dir', path.join(dir, 's')]);
  t.equal(result.code, 2);
  t.match(result.stderr, /--control-plane must be an https:\/\/ URL/);
  t.notOk(await exists(path.join(dir, 's')), 'the state dir is not even created');
});

t.test('a control plane whose certificate another CA signed is "not trusted", with --ca-file or the system store', async (t) => {
  const server = await startEnrollServer(t);
  const dir = t.testdir({});
  const otherCa = path.join(dir, 'other-ca.pem');
  await writeFile(otherCa, (await createTestCa()).certPem);
  const withCa = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', path.join(dir, 's'), '--ca-file', otherCa]);
  t.equal(withCa.code, 1);
  t.match(withCa.stderr, /the control plane's certificate is not trusted \(checked against --ca-file .*other-ca\.pem\): .*other-ca\.pem is not the CA that signed the control plane's certificate: pass that CA with --ca-file \(`zenova gateway-node install-command NAME --ca-out FILE`/);
  const systemStore = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', path.join(dir, 's')]);
  t.equal(systemStore.code, 1);
  t.match(systemStore.stderr, /not trusted \(checked against this host's system trust store\): pass --ca-file with the control plane's CA \(`zenova gateway-node install-command NAME --ca-out FILE`/);
  t.notMatch(withCa.stderr + systemStore.stderr, /the install command names it/, 'zenova-node enroll is not always run from an install command');
  t.same(server.requests, [], 'no request got through an untrusted connection');
  t.notOk(withCa.stderr.includes(TOKEN) || systemStore.stderr.includes(TOKEN));
});

t.test('a certificate without the dialled host name is a "host name mismatch"', async (t) => {
  const server = await startEnrollServer(t, { names: { dnsNames: ['control.example'] } });
  const dir = t.testdir({});
  const result = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', path.join(dir, 's'), '--ca-file', await caFile(dir, server)]);
  t.equal(result.code, 1);
  t.match(result.stderr, /host name mismatch: the control plane's certificate is not valid for "127\.0\.0\.1"/);
  t.same(server.requests, []);
});

t.test('--token together with --token-file is a usage error, exit 2', async (t) => {
  const dir = t.testdir({ token: TOKEN });
  const result = await run(['enroll', '--control-plane', 'https://127.0.0.1:9', '--token', TOKEN, '--token-file', path.join(dir, 'token'), '--state-dir', path.join(dir, 's')]);
  t.equal(result.code, 2);
  t.match(result.stderr, /--token and --token-file cannot be used together/);
  t.match(result.stderr, /Usage: zenova-node enroll/);
  const neither = await run(['enroll', '--control-plane', 'https://127.0.0.1:9', '--state-dir', path.join(dir, 's')]);
  t.equal(neither.code, 2);
  t.match(neither.stderr, /needs --token TOKEN or --token-file FILE/);
});

t.test('a token file is read, and one readable by group or others draws a warning', async (t) => {
  const server = await startEnrollServer(t);
  const dir = t.testdir({});
  const tokenFile = path.join(dir, 'token');
  await writeFile(tokenFile, `${TOKEN}\n`);
  await chmod(tokenFile, 0o644);
  const loose = await run(['enroll', '--control-plane', server.url, '--token-file', tokenFile, '--state-dir', path.join(dir, 'a'), '--ca-file', await caFile(dir, server)]);
  t.equal(loose.code, 0, loose.stderr);
  t.match(loose.stderr, /warning: the token file .* is readable by group or others \(mode 0644\); keep it private \(chmod 600/);
  t.equal((server.requests[1]?.body as { token?: string }).token, TOKEN, 'the token came from the file, newline trimmed');

  await chmod(tokenFile, 0o600);
  const tight = await run(['enroll', '--control-plane', server.url, '--token-file', tokenFile, '--state-dir', path.join(dir, 'b'), '--ca-file', await caFile(dir, server)]);
  t.equal(tight.code, 0, tight.stderr);
  t.notMatch(tight.stderr, /warning/);
});

t.test('an existing identity is refused and left untouched without --reenroll; --reenroll replaces it and keeps other files', async (t) => {
  // The same node each time: a re-enrollment as another node moves its spool aside (enroll-another-node.test.ts).
  const nodeId = randomUUID();
  const server = await startEnrollServer(t, { nodeId: () => nodeId });
  const dir = t.testdir({});
  const stateDir = path.join(dir, 'state');
  const ca = await caFile(dir, server);
  t.equal((await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', ca])).code, 0);
  const spool = path.join(stateDir, 'spool.db');
  await writeFile(spool, 'unsent records');
  const before = await readFile(path.join(stateDir, 'identity.json'), 'utf8');
  const credentialBefore = await readFile(path.join(stateDir, 'credential.json'), 'utf8');
  const requestsBefore = server.requests.length;

  const again = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', ca]);
  t.equal(again.code, 1);
  t.match(again.stderr, /already holds the identity of node edge-1 .*nothing was changed.*--reenroll/);
  t.equal(await readFile(path.join(stateDir, 'identity.json'), 'utf8'), before, 'identity untouched');
  t.equal(await readFile(path.join(stateDir, 'credential.json'), 'utf8'), credentialBefore, 'credential untouched');
  t.equal(server.requests.length, requestsBefore, 'the control plane was not even asked');

  const re = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', ca, '--reenroll']);
  t.equal(re.code, 0, re.stderr);
  t.match(re.stdout, /re-enrolled node edge-1/);
  t.equal((server.requests.at(-1)?.body as { mode?: string }).mode, 'reenroll');
  t.not(await readFile(path.join(stateDir, 'identity.json'), 'utf8'), before, 'identity replaced');
  t.equal(JSON.parse(await readFile(path.join(stateDir, 'credential.json'), 'utf8')).current.secret, server.lastCredential());
  t.equal(await readFile(spool, 'utf8'), 'unsent records', 'other files in the state dir are kept');
});

t.test('a clock more than 30 s off the control plane is refused at preflight, before the token is sent', async (t) => {
  const server = await startEnrollServer(t, { preflight: () => preflightAnswer({ serverTimeMs: Date.now() + 120_000 }) });
  const dir = t.testdir({});
  const result = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', path.join(dir, 's'), '--ca-file', await caFile(dir, server)]);
  t.equal(result.code, 1);
  t.match(result.stderr, /this host's clock is 2 min 0 s behind the control plane's \(at most 30 s allowed\): sync the clock/);
  t.same(server.requests.map((r) => r.method), ['GET'], 'no redemption was attempted');
});

t.test('a control plane with another protocol version is refused at preflight', async (t) => {
  const server = await startEnrollServer(t, { preflight: () => preflightAnswer({ protocolVersion: PROTOCOL_VERSION + 1, version: '9.0.0' }) });
  const dir = t.testdir({});
  const result = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', path.join(dir, 's'), '--ca-file', await caFile(dir, server)]);
  t.equal(result.code, 1);
  t.match(result.stderr, /control protocol mismatch.*the peer is newer, upgrade this side/);
  t.same(server.requests.map((r) => r.method), ['GET']);
});

t.test('an enrollment answer that fails validation saves nothing', async (t) => {
  const server = await startEnrollServer(t, {
    enroll: () => ({ status: 200, body: { nodeId: 'n1', nodeName: 'edge-1', credential: { id: 'c', secret: 's', expiresAt: 'soon' }, gateway: { target: 'x', serverName: 'y', caPem: 'z' } } }),
  });
  const dir = t.testdir({});
  const stateDir = path.join(dir, 's');
  const result = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', await caFile(dir, server)]);
  t.equal(result.code, 1);
  t.match(result.stderr, /enrollment answer is not usable .*nothing was saved/);
  t.notOk(await exists(path.join(stateDir, 'credential.json')));
  t.notOk(await exists(path.join(stateDir, 'identity.json')));
});

t.test('enroll --help lists every option', async (t) => {
  const result = await run(['enroll', '--help']);
  t.equal(result.code, 0);
  for (const flag of ['--control-plane URL', '--token TOKEN', '--token-file FILE', '--state-dir DIR', '--ca-file FILE', '--reenroll']) t.match(result.stdout, flag);
});

t.test('enrolling with the console page\'s address names the URL it asked and the callback URL to pass instead', async (t) => {
  const server = await startEnrollServer(t);
  const dir = t.testdir({});
  const result = await run(['enroll', '--control-plane', `${server.url}/console/`, '--token', TOKEN, '--state-dir', path.join(dir, 'state'), '--ca-file', await caFile(dir, server)]);
  t.equal(result.code, 1, result.stderr);
  t.match(result.stderr, `HTTP 404 on ${server.url}/console/api/enroll/preflight`, 'the URL it asked, in full');
  t.match(result.stderr, `is the console page's address; pass the control plane's callback URL without it (${server.url})`);
  t.notOk(result.stderr.includes(TOKEN), 'the token is not printed');
  const help = await run(['enroll', '--help']);
  t.notMatch(help.stdout, /console URL/, 'the help does not ask for the console URL');
});
