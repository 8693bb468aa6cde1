// A directory where spool.db should be stops `serve` with one line naming it and what to do (exit 2),
// not "unexpected failure: EISDIR" and exit 1; the directory is left as it was.
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { startFakeGateway, writeEnrolledState } from '../control-fixtures.js';
import { serveRefusal } from '../serve-refusal.js';

t.test('serve refuses a directory at spool.db with one line naming it and what to do, exit 2', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway);
  const file = path.join(state.dir, 'spool.db');
  mkdirSync(file);
  // Not empty: an empty directory's size is 0 on some file systems, which the spool's size check meets first.
  writeFileSync(path.join(file, 'records'), 'x');
  const { listened, code, said, output } = await serveRefusal(t, state.dir);
  t.notOk(listened, 'serve did not start');
  if (listened) return;
  t.equal(code, 2, 'exit 2, as for every state file refusal');
  t.same(said, [
    `zenova-node: ${file}: is a directory, not a spool file; it was left untouched: move it aside, and put the spool file back at this path (with its -wal and -shm) if you have it`,
  ]);
  t.notMatch(output, /unexpected failure|node-edge listening/);
  t.same(readdirSync(file), ['records'], 'the directory was left as it was');
});
