/**
 * A state dir that holds a node's identity but no credential.json: enroll refuses it without
 * --reenroll, so status and serve say to re-enroll (as doctor does), never plain "enroll".
 */
import { rm } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { runNodeCli as run } from './cli-capture.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';

async function withoutCredential(t: Test) {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  await rm(state.store.path('credential.json'));
  return state;
}

const REENROLL = /re-enroll it: `zenova-node enroll --reenroll --state-dir \S+ …` with a token from `zenova gateway-node reenroll-command edge-test`/;

t.test('status of a state dir with an identity but no credential.json says to re-enroll with --reenroll and a reenroll token, exit 1', async (t) => {
  const state = await withoutCredential(t);
  const status = await run(['status', '--state-dir', state.dir]);
  t.equal(status.code, 1);
  t.match(status.stdout, `not enrolled (${state.dir}: node edge-test (id ${state.identity.nodeId}) has no credential.json); `);
  t.match(status.stdout, REENROLL);
  t.notMatch(status.stdout, /run `zenova-node enroll`/);

  // The advice is the one that works: enroll without --reenroll refuses this dir.
  const enroll = await run(['enroll', '--control-plane', 'https://127.0.0.1:9', '--token', 'zn_it_x', '--state-dir', state.dir]);
  t.equal(enroll.code, 1);
  t.match(enroll.stderr, /already holds the identity of node edge-test .* pass --reenroll/);
});

t.test('status of a state dir without an identity still says to enroll', async (t) => {
  const dir = t.testdir({ state: {} });
  const status = await run(['status', '--state-dir', path.join(dir, 'state')]);
  t.equal(status.code, 1);
  t.match(status.stdout, /not enrolled \(.*\); run `zenova-node enroll`/);
});

t.test('serve with an identity but no credential.json stops with exit 2 and says to re-enroll with --reenroll, not to enroll', async (t) => {
  const state = await withoutCredential(t);
  const serve = await run(['serve', '--state-dir', state.dir, '--listen', '127.0.0.1:0']);
  t.equal(serve.code, 2);
  t.match(serve.stderr, `zenova-node: ${state.dir} holds the identity of node edge-test (id ${state.identity.nodeId}) but no credential.json: `);
  t.match(serve.stderr, REENROLL);
  t.notMatch(serve.stderr, /… first/);
});
