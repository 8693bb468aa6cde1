/**
 * Retrying a lost enrollment answer, node side: the redemption key is saved (0600, in the state
 * dir) before the token is first sent, a rerun of the same command with the same token after a cut
 * connection sends the same key (also after a refusal that did not settle the token, such as a rate
 * limit), and the attempt file is gone once the identity is saved or the token is refused for good.
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { runNodeCli as run } from './cli-capture.js';
import { CONFIG_SIGNING_PUBLIC_KEY_PEM, preflightAnswer, startEnrollServer } from './enroll-fixtures.js';
import type { Answer, EnrollServer } from './enroll-fixtures.js';

const TOKEN = 'zn_it_UmV0cnlUaGVMb3N0QW5zd2VyV2l0aFRoZVNhbWVLZXkwMTIzNDU2';
const OTHER_TOKEN = 'zn_it_QW5vdGhlclRva2VuQW5vdGhlcktleUFub3RoZXJBdHRlbXB0MDEy';

const exists = (file: string): Promise<boolean> => stat(file).then(() => true, () => false);

interface Seen { key: unknown; fileMode: number | undefined; fileKey: unknown; fileText: string }

/** A control plane whose redemption handler is `answer`; it records what the attempt file held at each call. */
async function server(t: { teardown(fn: () => unknown): void }, stateDir: string, answer: (call: number, srv: EnrollServer) => Answer) {
  const seen: Seen[] = [];
  const srv: EnrollServer = await startEnrollServer(t, {
    enroll: (body) => {
      const file = path.join(stateDir, 'enroll-attempt.json');
      let fileMode: number | undefined;
      let fileKey: unknown;
      let fileText = '';
      try {
        fileMode = statSync(file).mode & 0o777;
        fileText = readFileSync(file, 'utf8');
        fileKey = (JSON.parse(fileText) as { redemptionKey?: unknown }).redemptionKey;
      } catch {
        // no file
      }
      seen.push({ key: (body as { redemptionKey?: unknown }).redemptionKey, fileMode, fileKey, fileText });
      return answer(seen.length, srv);
    },
  });
  return { srv, seen };
}

function success(srv: EnrollServer): Answer {
  const id = randomUUID();
  return {
    status: 200,
    body: {
      nodeId: '5d0a3fc6-c87e-4a66-9e9e-f2fd50c79a26',
      nodeName: 'edge-1',
      credential: { id, secret: `${id}.${randomBytes(32).toString('base64url')}`, expiresAt: new Date(Date.now() + 86_400_000).toISOString() },
      gateway: { target: '127.0.0.1:8443', serverName: 'localhost', caPem: srv.gatewayCa.certPem },
      configSigningPublicKeyPem: CONFIG_SIGNING_PUBLIC_KEY_PEM,
      controlPlaneUrl: srv.url,
    },
  };
}

async function caFile(dir: string, srv: EnrollServer): Promise<string> {
  const file = path.join(dir, 'ca.pem');
  await writeFile(file, srv.ca.certPem);
  return file;
}

t.test('the key is saved 0600 before the call, reused by a rerun after a cut connection, and removed after success', async (t) => {
  const dir = t.testdir({});
  const stateDir = path.join(dir, 'state');
  const { srv, seen } = await server(t, stateDir, (call, s) => {
    // The first answer is lost: the connection is cut after the control plane got the request.
    if (call === 1) throw new Error('cut');
    return success(s);
  });
  const args = ['enroll', '--control-plane', srv.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', await caFile(dir, srv)];
  const first = await run(args);
  t.equal(first.code, 1, 'the cut connection fails the first run');
  t.notOk(await exists(path.join(stateDir, 'identity.json')), 'nothing enrolled yet');
  t.equal(seen[0]?.fileMode, 0o600, 'the attempt file existed, 0600, when the token was sent');
  t.match(seen[0]?.key, /^[A-Za-z0-9_-]{43}$/, 'a 32-byte base64url redemption key was sent');
  t.equal(seen[0]?.fileKey, seen[0]?.key, 'the key sent is the saved one');
  t.notOk(seen[0]?.fileText.includes(TOKEN), 'the token itself is not saved');
  t.match(seen[0]?.fileText, createHash('sha256').update(TOKEN).digest('hex'), 'the attempt is keyed by the token hash');

  const second = await run(args);
  t.equal(second.code, 0, second.stderr);
  t.equal(seen[1]?.key, seen[0]?.key, 'the rerun sends the same key');
  t.notOk(await exists(path.join(stateDir, 'enroll-attempt.json')), 'the attempt file is removed after success');
  t.ok(await exists(path.join(stateDir, 'identity.json')));
  for (const text of [first.stdout, first.stderr, second.stdout, second.stderr]) t.notOk(text.includes(String(seen[0]?.key)), 'the key is never printed');
});

t.test('another token gets another key; a control plane without redemption keys gets none and no file is written', async (t) => {
  const dir = t.testdir({});
  const stateDir = path.join(dir, 'state');
  const { srv, seen } = await server(t, stateDir, () => { throw new Error('cut'); });
  const ca = await caFile(dir, srv);
  await run(['enroll', '--control-plane', srv.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', ca]);
  await run(['enroll', '--control-plane', srv.url, '--token', OTHER_TOKEN, '--state-dir', stateDir, '--ca-file', ca]);
  t.match(seen[1]?.key, /^[A-Za-z0-9_-]{43}$/);
  t.not(seen[1]?.key, seen[0]?.key, 'a new key for another token');
  t.equal(JSON.parse(await readFile(path.join(stateDir, 'enroll-attempt.json'), 'utf8')).redemptionKey, seen[1]?.key);

  const oldDir = path.join(dir, 'old-state');
  const old = await startEnrollServer(t, { preflight: () => preflightAnswer({ redemptionKeys: undefined }) });
  const res = await run(['enroll', '--control-plane', old.url, '--token', TOKEN, '--state-dir', oldDir, '--ca-file', await caFile(dir, old)]);
  t.equal(res.code, 0, res.stderr);
  t.notOk('redemptionKey' in (old.requests.at(-1)?.body as object), 'no key for a control plane that does not take one');
  t.notOk(await exists(path.join(oldDir, 'enroll-attempt.json')));
});

t.test('a refusal that settles the token (used) drops the attempt; a 5xx, which may come after the commit, keeps the key for the rerun', async (t) => {
  const dir = t.testdir({});
  const stateDir = path.join(dir, 'state');
  const refusals: Answer[] = [
    // PostgreSQL committed the redemption but its reply was lost: the control plane answers 503.
    { status: 503, body: { error: { message: 'The database is unavailable.', type: 'server_error', code: 'ZN_ERR_CP_DATABASE_UNAVAILABLE' } } },
    { status: 409, body: { error: { message: 'This install token was already used.', type: 'conflict_error', code: 'ZN_ERR_CP_TOKEN_USED' } } },
  ];
  const { srv, seen } = await server(t, stateDir, (call, s) => refusals[call - 1] ?? success(s));
  const args = ['enroll', '--control-plane', srv.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', await caFile(dir, srv)];
  t.equal((await run(args)).code, 1);
  t.ok(await exists(path.join(stateDir, 'enroll-attempt.json')), 'kept after the 503');
  t.equal((await run(args)).code, 1);
  t.equal(seen[1]?.key, seen[0]?.key, 'the rerun after the 503 sent the same key');
  t.notOk(await exists(path.join(stateDir, 'enroll-attempt.json')), 'dropped after the 409: nothing was redeemed with it');
});

t.test('a rerun refused by the rate limit (429) keeps the key, so the rerun after the wait is answered again', async (t) => {
  const dir = t.testdir({});
  const stateDir = path.join(dir, 'state');
  const rateLimited: Answer = {
    status: 429,
    headers: { 'retry-after': '42' },
    body: { error: { message: 'Too many enrollment attempts from this address; try again in 42 s.', type: 'rate_limit_error', code: 'ZN_ERR_CP_ENROLL_RATE_LIMITED' } },
  };
  const { srv, seen } = await server(t, stateDir, (call, s) => {
    if (call === 1) throw new Error('cut'); // the first answer is lost
    if (call === 2) return rateLimited; // hosts behind the same NAT used up the minute
    return success(s);
  });
  const args = ['enroll', '--control-plane', srv.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', await caFile(dir, srv)];
  t.equal((await run(args)).code, 1);
  const limited = await run(args);
  t.equal(limited.code, 1);
  t.match(limited.stderr, /too many enrollment attempts from this address: wait 42 s and try again/);
  t.ok(await exists(path.join(stateDir, 'enroll-attempt.json')), 'kept after the 429: it never looked at the token');
  const after = await run(args);
  t.equal(after.code, 0, after.stderr);
  t.same(seen.map((s) => s.key), [seen[0]?.key, seen[0]?.key, seen[0]?.key], 'every rerun sent the key of the lost answer');
});

const refusals: Array<{ status: number; code: string; dropped: boolean }> = [
  { status: 401, code: 'ZN_ERR_CP_TOKEN_UNKNOWN', dropped: true },
  { status: 401, code: 'ZN_ERR_CP_TOKEN_EXPIRED', dropped: true },
  { status: 401, code: 'ZN_ERR_CP_TOKEN_SUPERSEDED', dropped: true },
  { status: 400, code: 'ZN_ERR_CP_TOKEN_WRONG_KIND', dropped: true },
  { status: 410, code: 'ZN_ERR_CP_NODE_DELETED', dropped: true },
  // Checked before the token is looked at: a rerun may reach a control plane that takes it.
  { status: 400, code: 'ZN_ERR_CP_PROTOCOL_INCOMPATIBLE', dropped: false },
  { status: 400, code: 'ZN_ERR_CP_INVALID_REQUEST', dropped: false },
  { status: 413, code: 'ZN_ERR_CP_BODY_TOO_LARGE', dropped: false },
  { status: 429, code: 'ZN_ERR_CP_ENROLL_RATE_LIMITED', dropped: false },
];

for (const refusal of refusals) {
  t.test(`${refusal.code} ${refusal.dropped ? 'settles the token and drops the attempt' : 'does not settle the token and keeps the attempt'}`, async (t) => {
    const dir = t.testdir({});
    const stateDir = path.join(dir, 'state');
    const { srv } = await server(t, stateDir, () => ({ status: refusal.status, body: { error: { message: 'refused', type: 'invalid_request_error', code: refusal.code } } }));
    t.equal((await run(['enroll', '--control-plane', srv.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', await caFile(dir, srv)])).code, 1);
    t.equal(await exists(path.join(stateDir, 'enroll-attempt.json')), !refusal.dropped);
  });
}
