// serve on a state dir it may read but not write (run as another user than its owner, or a
// read-only mount) stops at once with a line that says so and what to do, exit 2, instead of
// SQLite's "unable to open database file" and exit 1.
import t from 'tap';
import { runNodeCliAsAnotherUser } from './cli-capture.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';

t.test('serve on a state dir it cannot write says so, names the dir and what to do, exit 2', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(t.testdir({}), gateway);
  // Others may enter and read the dir, not write it.
  const result = await runNodeCliAsAnotherUser(t, state.dir, 0o005, ['serve', '--state-dir', state.dir, '--listen', '127.0.0.1:0']);
  t.equal(result.code, 2, result.stderr);
  t.match(result.stderr, `zenova-node: ${state.dir}: cannot be written (permission denied); node-edge keeps its request spool, config cache and status there: run it as the user that owns the state dir`);
  t.notMatch(result.stderr, /unable to open database file|unexpected failure/);
});
