// MCP session bindings in the node's state dir (mcp-sessions.sqlite): what one store instance binds,
// another on the same file (a replica, or the node after a restart) enforces; two processes
// claiming the same unknown sessions agree on one owner each; the table keeps its bound, dropping
// the least recently used; the raw session id never reaches the file.
import { readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { SESSION_OWNER_FILE, SqliteSessionOwnerStore, TOUCH_EVERY_MS } from '../../../edge-node/src/providers/mcp/sqlite-session-owner-store.js';
import { SessionOwners, sessionEntry } from '../../../edge-node/src/providers/mcp/session-owners.js';
import { parseJsonLines, startProcess, tsEntry } from '../../fixtures/processes.js';
import { ManualClock, T0 } from '../rate-limit/limit-fixtures.js';

function open(t: Test, dir: string, opts: { max?: number; clock?: ManualClock } = {}): { store: SqliteSessionOwnerStore; owners: SessionOwners } {
  const store = new SqliteSessionOwnerStore({ stateDir: dir, ...opts });
  t.teardown(() => store.close());
  return { store, owners: new SessionOwners(store) };
}

t.test('a session bound through one store is refused to other keys by a second store on the same file, and after a restart', async (t) => {
  const dir = t.testdir();
  const a = open(t, dir).owners;
  const b = open(t, dir).owners;
  a.bind('tools', 'sess-1', 'key-a');
  t.equal(b.admit('tools', 'sess-1', 'key-b'), false, 'the other replica refuses key B');
  t.equal(b.admit('tools', 'sess-1', 'key-a'), true, 'and admits the owner');
  t.equal(b.admit('other', 'sess-1', 'key-b'), true, 'sessions are per tool server');

  b.claim('tools', 'sess-2', 'key-b');
  t.equal(a.admit('tools', 'sess-2', 'key-a'), false, 'a claim made on one replica holds on the other');
  b.claim('tools', 'sess-2', 'key-a');
  t.equal(a.admit('tools', 'sess-2', 'key-b'), true, 'a second claim does not move a claimed session');

  a.close();
  b.close();
  const restarted = open(t, dir).owners;
  t.equal(restarted.admit('tools', 'sess-1', 'key-b'), false, 'the restarted node still refuses key B');
  t.equal(restarted.admit('tools', 'sess-1', 'key-a'), true, 'and admits key A');
  restarted.forget('tools', 'sess-1');
  t.equal(open(t, dir).owners.admit('tools', 'sess-1', 'key-b'), true, 'a forgotten session is unbound for every instance');
});

t.test('the file is owner-only and keeps a hash of the session id, never the id', async (t) => {
  const dir = t.testdir();
  const { store, owners } = open(t, dir);
  const id = 'a-session-id-the-caller-chose-0123456789';
  owners.bind('tools', id, 'key-a');
  store.close();
  const file = path.join(dir, SESSION_OWNER_FILE);
  t.equal(statSync(file).mode & 0o777, 0o600, 'owner-only');
  const bytes = Buffer.concat([readFileSync(file), ...['-wal'].map((s) => { try { return readFileSync(file + s); } catch { return Buffer.alloc(0); } })]);
  t.notOk(bytes.includes(id), 'the raw id is nowhere in the file');
  t.ok(bytes.includes('key-a'), 'the key id is');
});

t.test('two processes claiming the same unknown sessions at once: each session has exactly one owner, the same for both', async (t) => {
  const dir = t.testdir();
  const count = 2000;
  // Opened first so the schema exists before the race.
  open(t, dir).store.close();
  const entry = tsEntry('test/edge-node/mcp/session-claimer.ts');
  const claimers = await Promise.all(
    ['key-a', 'key-b'].map((key) =>
      startProcess({ name: `claimer-${key}`, ...entry, args: [...entry.args, dir, key, String(count)], readyLine: /^ready$/, t })),
  );
  for (const claimer of claimers) claimer.child.kill('SIGUSR2');
  const seen = await Promise.all(claimers.map(async (claimer) => {
    const exit = await claimer.exited;
    t.equal(exit.code, 0, 'the claimer finished');
    if (exit.code !== 0) t.comment(claimer.output());
    const owners = parseJsonLines(claimer.output()).find((line) => 'owners' in line)?.owners;
    return owners as string[];
  }));
  const [byA, byB] = seen as [string[], string[]];
  const check = open(t, dir).store;
  let notOneWinner = 0;
  let disagreements = 0;
  for (let i = 0; i < count; i++) {
    const winners = Number(byA[i] === 'key-a') + Number(byB[i] === 'key-b');
    if (winners !== 1) notOneWinner += 1;
    if (byA[i] !== byB[i] || byA[i] !== check.get(`session-${i}`)?.keyId) disagreements += 1;
  }
  t.equal(notOneWinner, 0, 'each session was won by exactly one claimer');
  t.equal(disagreements, 0, 'both claimers saw the owner the file keeps');
  // Both claim in the same order, so they contend for the same rows while they overlap.
  t.comment(`won by A: ${byA.filter((o) => o === 'key-a').length}, by B: ${byB.filter((o) => o === 'key-b').length}`);
  t.equal(check.size(), count, 'one row per session');
});

t.test('the table keeps its bound across instances, dropping the binding used least recently', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const a = open(t, dir, { max: 3, clock });
  const b = open(t, dir, { max: 3, clock });
  a.owners.bind('tools', 's1', 'key-a');
  a.owners.bind('tools', 's1', 'key-b');
  t.equal(a.store.size(), 1, 'rebinding a session replaces its row');
  clock.advance(1);
  a.owners.bind('tools', 's2', 'key-a');
  clock.advance(1);
  b.owners.bind('tools', 's3', 'key-a');
  t.equal(b.store.size(), 3, 'at the bound nothing went');

  clock.advance(TOUCH_EVERY_MS - 3);
  t.equal(b.owners.admit('tools', 's1', 'key-b'), true, 'the owner uses s1 within a minute');
  t.equal(a.store.get(sessionEntry('tools', 's1'))?.lastUsedMs, T0, 'a use within a minute of the last writes nothing');
  clock.advance(3);
  t.equal(b.owners.admit('tools', 's1', 'key-b'), true, 'the owner uses s1 a minute after the last recorded use');
  t.equal(a.store.get(sessionEntry('tools', 's1'))?.lastUsedMs, clock.ms, 'a use a minute later is recorded: s1 is now the most recent');

  clock.advance(1);
  a.owners.bind('tools', 's4', 'key-a');
  t.equal(a.store.size(), 3, 'one binding went');
  t.equal(b.owners.admit('tools', 's2', 'key-b'), true, 's2, used least recently, is unknown again');
  t.equal(b.owners.admit('tools', 's1', 'key-a'), false, 's1 kept its owner');
  t.equal(b.owners.admit('tools', 's3', 'key-b'), false, 's3 kept its owner');
  t.equal(b.owners.admit('tools', 's4', 'key-b'), false, 's4 is bound');

  clock.advance(1);
  b.owners.claim('tools', 's5', 'key-b');
  t.equal(a.store.size(), 3, 'a claim on the other instance keeps the same bound');
  t.equal(a.owners.admit('tools', 's3', 'key-b'), true, 's3 went next');
});

