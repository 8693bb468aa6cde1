// Stands in for node-edge in spool-wal-damage.test.ts: opens the spool, commits group commits of 10
// records each (every finalise resolved: its answer sent), prints the count and kills itself with
// SIGKILL, leaving its WAL not checkpointed. argv: file, spool meta (JSON), mode.
// - `whole`: `groups` commits in one WAL. A read transaction begun first holds the checkpoint
//   worker off (a checkpoint waits for readers of the database file), so the WAL keeps every frame.
// - `reset`: `groups` commits, a RESTART checkpoint (as the store's own fallback checkpoint or the
//   worker's that catches up lets the next commit start the WAL again), then `after` commits,
//   fewer frames than before: the WAL ends with the old generation's frames.
import Database from 'better-sqlite3';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { quietLogger, record } from './spool-helpers.js';

const [file, metaJson, mode, groups, after] = [process.argv[2] ?? '', process.argv[3] ?? '', process.argv[4], Number(process.argv[5]), Number(process.argv[6] ?? 0)];
const store = new SpoolStore({ file, meta: JSON.parse(metaJson), logger: quietLogger(), limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }) });

async function commit(prefix: string, count: number): Promise<void> {
  for (let c = 0; c < count; c++) await Promise.all(Array.from({ length: 10 }, (_, i) => store.finalise(record(`${prefix}-${c}-${i}`))));
}

if (mode === 'whole') {
  const reader = new Database(file, { readonly: true });
  reader.exec('begin');
  reader.prepare('select count(*) from records').get();
  await commit('r', groups);
} else {
  await commit('r', groups);
  store.writerPragma('wal_checkpoint(RESTART)');
  await commit('s', after);
}
process.stdout.write(`${store.backlogCount()}\n`);
process.kill(process.pid, 'SIGKILL');
