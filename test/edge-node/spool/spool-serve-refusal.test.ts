// `zenova-node serve` with a damaged spool: one clear line naming the file and what to do, a
// non-zero exit, nothing listening, and the file byte-identical afterwards.
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { startProcess, tsEntry } from '../../fixtures/processes.js';
import { startFakeGateway, writeEnrolledState } from '../control-fixtures.js';

t.test('serve refuses a garbage spool file with a message naming it, exits non-zero and leaves it untouched', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), gateway);
  const file = path.join(state.dir, 'spool.db');
  writeFileSync(file, Buffer.alloc(4096, 0x42));
  const before = createHash('sha256').update(readFileSync(file)).digest('hex');
  const entry = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({ name: 'zenova-node serve', command: entry.command, args: [...entry.args, 'serve', '--state-dir', state.dir, '--listen', '127.0.0.1:0'], t });
  const exit = await proc.exited;
  t.not(exit.code, 0, 'non-zero exit');
  const output = proc.output();
  t.match(output, `zenova-node: ${file}: is not a SQLite database`, 'one line naming the file');
  t.match(output, /left untouched.*Move it aside/);
  t.notMatch(output, /node-edge listening/);
  t.equal(createHash('sha256').update(readFileSync(file)).digest('hex'), before, 'byte-identical');
});
