// Replicas started together on a freshly enrolled state dir (systemd starting node-edge@1..N) each
// find no spool.db. Each used to create one and rename it into place, replacing the spool another
// had already opened (the two then shared one -wal: records reported durable were lost, or spool.json
// named the replaced spool and every later start was refused). Now the check, the creation and the
// marker run under the lock of spool.db.lock, and a new spool is published with link(), which never
// replaces a file.
import { readdirSync, readlinkSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { createSpoolFile, SPOOL_FILE, SpoolFileExistsError } from '../../../edge-node/src/spool/spool-file.js';
import { startProcess, tsEntry } from '../../fixtures/processes.js';
import type { StartedProcess } from '../../fixtures/processes.js';
import { NODE_ID, quietLogger, tempStateDir } from './spool-helpers.js';

const RECORDS = 300;
/**
 * How much later the second replica starts, per trial: records were lost when it replaced the spool
 * after the first had opened it, a few milliseconds apart (at 0 both usually replaced the file
 * before either opened it).
 */
const SECOND_START_DELAYS_MS = [0, 3, 6, 9, 12];
/** How far ahead the shared start instant is: both replicas poll for it every millisecond. */
const START_AHEAD_MS = 100;

async function replica(t: Parameters<typeof tempStateDir>[0], stateDir: string, name: string, goFile: string, delayMs: number): Promise<StartedProcess> {
  const { command, args } = tsEntry('test/edge-node/spool/spool-create-race-child.ts');
  return startProcess({ name: `replica ${name}`, command, args: [...args, stateDir, name, String(RECORDS), goFile, String(delayMs)], readyLine: /^ready$/, timeoutMs: 60_000, t });
}

t.test('replicas creating the spool at the same moment end with one spool holding every record they were told was durable', async (t) => {
  for (const [trial, delayMs] of SECOND_START_DELAYS_MS.entries()) {
    const stateDir = tempStateDir(t);
    const goFile = path.join(tempStateDir(t), 'go');
    const replicas = await Promise.all([replica(t, stateDir, 'a', goFile, 0), replica(t, stateDir, 'b', goFile, delayMs)]);
    // Both loaded: released together, at an instant both have read by then.
    writeFileSync(`${goFile}.tmp`, String(Date.now() + START_AHEAD_MS));
    renameSync(`${goFile}.tmp`, goFile);
    const results = await Promise.all(replicas.map(async (r) => {
      await r.exited;
      const line = r.output().split('\n').find((l) => l.startsWith('{'));
      return line === undefined ? { error: r.output().slice(-500) } : (JSON.parse(line) as { name?: string; durable?: number; error?: string });
    }));
    t.same(results.map((r) => r.durable), [RECORDS, RECORDS], `trial ${trial}: both replicas finalised every record (${JSON.stringify(results)})`);

    // A restart: the marker names the spool that is there, and every record is in it.
    const restarted = await openNodeSpool({ stateDir, nodeId: NODE_ID, holder: ConfigHolder.notReady('test'), logger: quietLogger(), synchronous: 'normal' });
    t.equal(restarted.figures().backfillBacklog, 2 * RECORDS, `trial ${trial}: the restart opens the spool with every record`);
    await restarted.close();
    const db = new Database(path.join(stateDir, SPOOL_FILE), { readonly: true });
    const ids = db.prepare('select request_id from records').pluck().all() as string[];
    db.close();
    const expected = ['a', 'b'].flatMap((name) => Array.from({ length: RECORDS }, (_, i) => `req_${name}_${i}`));
    t.same(ids.sort(), expected.sort(), `trial ${trial}: spool.db holds every finalised record`);
    t.same(readdirSync(stateDir).filter((f) => f.includes('.new-')), [], `trial ${trial}: no temporary spool left`);
  }
});

t.test('a new spool is never published over a file that appeared at spool.db after the check', async (t) => {
  const stateDir = tempStateDir(t);
  const file = path.join(stateDir, SPOOL_FILE);
  // A dangling link passes the "does it exist" check (it follows links), as a file another process
  // creates just after that check does; a rename would replace it.
  symlinkSync('elsewhere.db', file);
  t.throws(() => createSpoolFile(file, NODE_ID), SpoolFileExistsError);
  t.equal(readlinkSync(file), 'elsewhere.db', 'what was at spool.db is still there');
  t.same(readdirSync(stateDir).filter((f) => f.includes('.new-')), [], 'the temporary spool is removed');
});
