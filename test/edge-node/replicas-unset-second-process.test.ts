// A second `zenova-node serve` on a state dir another one serves from, with ZENOVA_NODE_REPLICAS
// unset (default 1), used to start silently: each process kept its rate-limit counters in memory,
// every limit multiplied by the number of processes (DESIGN §5: limits hold node-wide). It is now
// refused at start-up (exit 2, one line telling the operator to set ZENOVA_NODE_REPLICAS on every
// instance), found by the spool owner slot the running process holds. A restart of a single node,
// after a clean stop or a kill -9 (its slot's lock gone with it), still starts.
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { startProcess, tsEntry } from '../fixtures/processes.js';
import type { StartedProcess } from '../fixtures/processes.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';

const LISTENING = /"msg":"node-edge listening"/;

function serve(t: Test, stateDir: string, name: string, env: NodeJS.ProcessEnv, readyLine?: RegExp): Promise<StartedProcess> {
  const { command, args } = tsEntry('edge-node/src/main.ts');
  return startProcess({
    name,
    command,
    args: [...args, 'serve', '--state-dir', stateDir, '--listen', '127.0.0.1:0'],
    env,
    ...(readyLine !== undefined ? { readyLine } : {}),
    timeoutMs: 60_000,
    t,
  });
}

async function enrolledDir(t: Test): Promise<string> {
  const gateway = await startFakeGateway(t);
  return (await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway)).dir;
}

t.test('a second serve with ZENOVA_NODE_REPLICAS unset is refused with exit 2, told to set it on every instance, and the first serves on', async (t) => {
  const stateDir = await enrolledDir(t);
  const first = await serve(t, stateDir, 'first', { ZENOVA_NODE_REPLICAS: undefined }, LISTENING);
  for (const env of [{ ZENOVA_NODE_REPLICAS: undefined }, { ZENOVA_NODE_REPLICAS: '1' }]) {
    const second = await serve(t, stateDir, 'second', env);
    // Whichever comes first: its exit, or (as before the fix) its listening line.
    const outcome = await Promise.race([
      second.exited.then((exit) => exit.code),
      second.waitForLine(LISTENING, 60_000).then(() => 'listening', () => 'neither'),
    ]);
    t.equal(outcome, 2, `refused with exit 2 (ZENOVA_NODE_REPLICAS=${env.ZENOVA_NODE_REPLICAS ?? 'unset'})`);
    const output = second.output();
    t.match(output, /zenova-node: another node-edge process is serving from .*set ZENOVA_NODE_REPLICAS to the number of processes on every one of them/);
    t.notMatch(output, LISTENING, 'it never listened');
  }
  t.equal(first.child.exitCode, null, 'the first is still running');
  t.equal(await first.stop(), 0);
});

t.test('with ZENOVA_NODE_REPLICAS unset a single node starts again after a clean stop and after a kill -9', async (t) => {
  const stateDir = await enrolledDir(t);
  const first = await serve(t, stateDir, 'first', { ZENOVA_NODE_REPLICAS: undefined }, LISTENING);
  t.equal(await first.stop(), 0);
  const second = await serve(t, stateDir, 'after a clean stop', { ZENOVA_NODE_REPLICAS: undefined }, LISTENING);
  await second.kill9();
  const third = await serve(t, stateDir, 'after a kill -9', { ZENOVA_NODE_REPLICAS: undefined }, LISTENING);
  t.match(third.output(), LISTENING, 'it serves');
  t.equal(await third.stop(), 0);
});

t.test('with ZENOVA_NODE_REPLICAS=2 on both, the second serves beside the first', async (t) => {
  const stateDir = await enrolledDir(t);
  const first = await serve(t, stateDir, 'first', { ZENOVA_NODE_REPLICAS: '2' }, LISTENING);
  const second = await serve(t, stateDir, 'second', { ZENOVA_NODE_REPLICAS: '2' }, LISTENING);
  t.match(second.output(), LISTENING);
  t.equal(await second.stop(), 0);
  t.equal(await first.stop(), 0);
});
