/**
 * `zenova-node enroll --reenroll` names the node its state dir holds (`installedNodeId`) to a control
 * plane that takes it, so a token of another live node is refused before anything is revoked; never
 * to an older control plane (it refuses unknown fields) or on a first enrollment. The refusal
 * (ZN_ERR_CP_TOKEN_WRONG_NODE) is one line naming this host's node and what to do, and leaves the
 * state dir as it was.
 */
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { runNodeCli as run } from './cli-capture.js';
import { preflightAnswer, startEnrollServer, tokenErrorAnswer } from './enroll-fixtures.js';
import type { Answer, EnrollServer } from './enroll-fixtures.js';

const TOKEN = 'zn_it_SW5zdGFsbGVkTm9kZUlkSXNTZW50V2l0aFJlZW5yb2xsMDEyMzQ1';
const NODE_X = '5d0a3fc6-c87e-4a66-9e9e-f2fd50c79a26';

async function caFile(dir: string, srv: EnrollServer): Promise<string> {
  const file = path.join(dir, 'ca.pem');
  await writeFile(file, srv.ca.certPem);
  return file;
}

/** Every file under `dir` with its content hash. */
function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (!e.isFile()) continue;
    const file = path.join(e.parentPath, e.name);
    out[path.relative(dir, file)] = createHash('sha256').update(readFileSync(file)).digest('hex');
  }
  return out;
}

/** A state dir and a control plane of this preflight whose answers all name node X. */
async function stateDirAndServer(t: Test, preflight: () => Answer) {
  const dir = t.testdir({});
  const srv = await startEnrollServer(t, { preflight, nodeId: () => NODE_X });
  return { dir, stateDir: path.join(dir, 'state'), srv, ca: await caFile(dir, srv) };
}

const enrollBodies = (srv: EnrollServer): Array<Record<string, unknown>> =>
  srv.requests.filter((r) => r.method === 'POST' && r.path === '/api/enroll').map((r) => r.body as Record<string, unknown>);

t.test('--reenroll sends the node id of the state dir\'s identity to a control plane that takes it; a first enrollment sends none', async (t) => {
  const { stateDir, srv, ca } = await stateDirAndServer(t, () => preflightAnswer({ installedNodeIds: true }));
  t.equal((await run(['enroll', '--control-plane', srv.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', ca])).code, 0);
  t.equal((await run(['enroll', '--control-plane', srv.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', ca, '--reenroll'])).code, 0);
  const [install, reenroll] = enrollBodies(srv);
  t.notOk('installedNodeId' in install!, 'no installed node on a first enrollment');
  t.equal(reenroll!.installedNodeId, NODE_X, 'the re-enrollment names the node this state dir holds');
});

t.test('an older control plane, whose preflight does not say it takes installedNodeId, is never sent it', async (t) => {
  const { stateDir, srv, ca } = await stateDirAndServer(t, () => preflightAnswer());
  t.equal((await run(['enroll', '--control-plane', srv.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', ca])).code, 0);
  t.equal((await run(['enroll', '--control-plane', srv.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', ca, '--reenroll'])).code, 0);
  t.notOk('installedNodeId' in enrollBodies(srv)[1]!, 'not sent');
});

t.test('a TOKEN_WRONG_NODE refusal is one line naming this host\'s node and what to do, and leaves the state dir as it was', async (t) => {
  const { stateDir, srv, ca } = await stateDirAndServer(t, () => preflightAnswer({ installedNodeIds: true }));
  t.equal((await run(['enroll', '--control-plane', srv.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', ca])).code, 0);
  const before = snapshot(stateDir);
  const refusing = await startEnrollServer(t, {
    ca: srv.ca,
    preflight: () => preflightAnswer({ installedNodeIds: true }),
    enroll: () => tokenErrorAnswer(403, 'ZN_ERR_CP_TOKEN_WRONG_NODE', 'This reenroll token was issued for another node.'),
  });
  const r = await run(['enroll', '--control-plane', refusing.url, '--token', TOKEN, '--state-dir', stateDir, '--ca-file', ca, '--reenroll']);
  t.equal(r.code, 1, 'exit 1');
  const lines = r.stderr.trim().split('\n');
  t.equal(lines.length, 1, 'one line');
  t.match(lines[0], `the token was issued for another node than node edge-1 (${NODE_X}), which this host holds`);
  t.match(lines[0], '`zenova gateway-node reenroll-command edge-1`');
  t.match(lines[0], '`zenova gateway-node delete edge-1 --yes`');
  t.match(lines[0], '(ZN_ERR_CP_TOKEN_WRONG_NODE)');
  t.notOk(r.stderr.includes(TOKEN), 'the token is not printed');
  t.same(snapshot(stateDir), before, 'the state dir is unchanged (no enroll attempt left, nothing retired)');
});
