/**
 * `zenova-node serve --replicas 2` on a state dir serve refuses (never enrolled; an identity without
 * its credential) says so once, in serve's words, exit 2, before any replica starts — not
 * `starting 2 replicas` and then the same refusal from each replica. Real child processes.
 */
import { spawnSync } from 'node:child_process';
import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { tsEntry } from '../fixtures/processes.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';

function serveReplicas(stateDir: string): { code: number | null; stdout: string; said: string[] } {
  const entry = tsEntry('edge-node/src/main.ts');
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.ZENOVA_NODE_REPLICAS;
  const child = spawnSync(entry.command, [...entry.args, 'serve', '--replicas', '2', '--state-dir', stateDir, '--listen', '127.0.0.1:0'], {
    encoding: 'utf8',
    env,
    timeout: 90_000,
    killSignal: 'SIGKILL',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return { code: child.status, stdout: child.stdout, said: `${child.stdout}${child.stderr}`.split('\n').filter((l) => l.startsWith('zenova-node: ')) };
}

function refusedOnceBeforeAnyReplica(t: Test, run: ReturnType<typeof serveReplicas>, line: string): void {
  t.equal(run.code, 2, run.said.join('\n'));
  t.same(run.said, [line], 'said once, in serve\'s words');
  t.notMatch(run.stdout, /starting 2 replicas|replica \d starting/, 'no replica was started');
}

t.test('serve --replicas 2 on a never-enrolled empty state dir: one line, exit 2, no replica started', async (t) => {
  const dir = path.join(t.testdir({}), 'state');
  await mkdir(dir, { mode: 0o700 });
  refusedOnceBeforeAnyReplica(t, serveReplicas(dir), `zenova-node: ${dir} is not enrolled (no identity.json): run \`zenova-node enroll --state-dir ${dir} …\` first`);
});

t.test('serve --replicas 2 on a state dir with an identity but no credential: one line saying to re-enroll, exit 2', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway);
  await rm(state.store.path('credential.json'));
  const run = serveReplicas(state.dir);
  refusedOnceBeforeAnyReplica(t, run, `zenova-node: ${state.dir} holds the identity of node ${state.identity.nodeName} (id ${state.identity.nodeId}) but no credential.json: re-enroll it: \`zenova-node enroll --reenroll --state-dir ${state.dir} …\` with a token from \`zenova gateway-node reenroll-command ${state.identity.nodeName}\` on the control plane`);
});
