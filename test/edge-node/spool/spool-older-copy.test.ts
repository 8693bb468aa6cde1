// An older copy of the node's own spool.db put back by hand (same spool id, so spool.json's id
// check passes) is refused at start: spool.json keeps the highest record sequence a checkpoint made
// durable, and a spool.db below it lacks records written after the copy, which would otherwise be
// gone without a word. The mark is never ahead of the file: replicas killed -9 while writing leave a
// spool that opens.
import { spawn } from 'node:child_process';
import { copyFileSync, readFileSync, renameSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { checkSpool } from '../../../edge-node/src/doctor/spool-check.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { SPOOL_FILE, spoolRecordSequence, SpoolRefusedError } from '../../../edge-node/src/spool/spool-file.js';
import { SPOOL_MARKER_FILE } from '../../../edge-node/src/spool/spool-marker.js';
import { openStateStore } from '../../../edge-node/src/state/state-store.js';
import { NODE_ID, quietLogger, record, tempStateDir } from './spool-helpers.js';

const open = (stateDir: string): ReturnType<typeof openNodeSpool> =>
  openNodeSpool({ stateDir, nodeId: NODE_ID, holder: ConfigHolder.notReady('test'), logger: quietLogger(), synchronous: 'normal' });

/** spool.json's sequence mark (0 when it has none). */
function markOf(stateDir: string): number {
  const marker = JSON.parse(readFileSync(path.join(stateDir, SPOOL_MARKER_FILE), 'utf8')) as { sequenceMark?: number };
  return marker.sequenceMark ?? 0;
}

async function waitFor(what: string, ok: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

t.test('an older copy of spool.db put back in place is refused, naming its sequence and the mark; moving spool.json aside accepts it', async (t) => {
  const stateDir = tempStateDir(t);
  const file = path.join(stateDir, SPOOL_FILE);
  const first = await open(stateDir);
  await Promise.all(['r1', 'r2'].map((id) => first.spool.finalise(record(id))));
  await first.close();
  const copy = path.join(stateDir, 'backup-spool.db');
  // A clean close leaves no -wal: the copy is the whole spool as it was.
  copyFileSync(file, copy);

  const second = await open(stateDir);
  try {
    await Promise.all(['r3', 'r4', 'r5'].map((id) => second.spool.finalise(record(id))));
    await waitFor('the mark to reach the last record', () => markOf(stateDir) >= 5);
  } finally {
    await second.close();
  }

  copyFileSync(copy, file);
  const refused = await open(stateDir).then(
    async (node) => {
      await node.close();
      return undefined;
    },
    (err: unknown) => err,
  );
  t.ok(refused instanceof SpoolRefusedError, `refused (${String(refused)})`);
  t.match((refused as Error).message, /is an older copy of spool .*: its records go up to sequence 2, but .*spool\.json says this spool had durably reached 5/);
  t.match((refused as Error).message, /put the newest spool\.db back .* move spool\.json aside to accept this file/);
  t.equal(spoolRecordSequence(file), 2, 'the file was left as it was');
  // doctor fails what serve refuses, with serve's message (it passed an older copy before).
  const check = await checkSpool(await openStateStore(stateDir, { create: false }), NODE_ID);
  t.equal(check.ok, false, 'doctor fails the older copy');
  t.match(check.advice, /`serve` refuses to start with it: .*is an older copy of spool .*: its records go up to sequence 2/);

  renameSync(path.join(stateDir, SPOOL_MARKER_FILE), path.join(stateDir, 'spool.json.aside'));
  const accepted = await open(stateDir);
  t.equal(accepted.figures().backfillBacklog, 2, 'the copy is served once the loss is accepted');
  await accepted.close();
});

t.test('replicas killed -9 while writing never leave the mark ahead of the spool: the next start opens it', async (t) => {
  const stateDir = tempStateDir(t);
  const file = path.join(stateDir, SPOOL_FILE);
  await (await open(stateDir)).close();
  const child = fileURLToPath(new URL('./spool-mark-writer-child.ts', import.meta.url));
  for (let trial = 0; trial < 3; trial++) {
    const before = markOf(stateDir);
    const replicas = ['a', 'b'].map((name) => spawn(process.execPath, ['--import', 'tsx', child, stateDir, `t${trial}-${name}`], { stdio: ['ignore', 'pipe', 'inherit'] }));
    const exits = replicas.map((r) => new Promise<void>((resolve) => r.once('exit', () => resolve())));
    t.teardown(() => replicas.forEach((r) => r.kill('SIGKILL')));
    await Promise.all(
      replicas.map(
        (r) =>
          new Promise<void>((resolve, reject) => {
            r.stdout.on('data', (chunk: Buffer) => chunk.toString().includes('ready') && resolve());
            r.once('exit', (code, signal) => reject(new Error(`a replica exited (${code ?? signal}) before it was ready`)));
          }),
      ),
    );
    // Killed while marks are being written: after the mark moved, at a moment that varies by trial.
    await waitFor(`trial ${trial}: the mark to move`, () => markOf(stateDir) > before);
    await new Promise((resolve) => setTimeout(resolve, 50 + trial * 700));
    replicas.forEach((r) => r.kill('SIGKILL'));
    await Promise.all(exits);
    const mark = markOf(stateDir);
    const node = await open(stateDir);
    await node.close();
    t.ok(spoolRecordSequence(file) >= mark, `trial ${trial}: the spool (sequence ${spoolRecordSequence(file)}) is not below the mark (${mark}) and opened`);
  }
});
