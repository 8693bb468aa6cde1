// MCP session bindings in the node's state dir (mcp-sessions.sqlite): what one store instance binds,
// another on the same file (a replica, or the node after a restart) enforces; an id no binding names
// is refused to every key; the table keeps its bound, dropping the least recently used; the raw
// session id never reaches the file; a locked or unreadable file fails closed without stalling calls.
import { readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { SESSION_OWNER_FILE, SqliteSessionOwnerStore, TOUCH_EVERY_MS } from '../../../edge-node/src/providers/mcp/sqlite-session-owner-store.js';
import Database from 'better-sqlite3';
import type { Logger } from '../../../edge-node/src/logger.js';
import { MemorySessionOwnerStore } from '../../../edge-node/src/providers/mcp/session-owner-store.js';
import { SessionOwners, openSessionOwners, sessionEntry } from '../../../edge-node/src/providers/mcp/session-owners.js';
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
  t.equal(b.admit('tools', 'sess-1', 'key-b'), 'refused', 'the other replica refuses key B');
  t.equal(b.admit('tools', 'sess-1', 'key-a'), 'admitted', 'and admits the owner');
  t.equal(b.admit('other', 'sess-1', 'key-a'), 'refused', 'sessions are per tool server: the same id on another is unknown');
  t.equal(b.admit('tools', 'SESS-1', 'key-a'), 'refused', 'another spelling of the id is unknown, to its owner too');
  t.equal(b.admit('tools', 'sess-2', 'key-a'), 'refused', 'an id never bound is refused to every key');
  t.equal(b.size, 1, 'admitting binds nothing');

  a.close();
  b.close();
  const restarted = open(t, dir).owners;
  t.equal(restarted.admit('tools', 'sess-1', 'key-b'), 'refused', 'the restarted node still refuses key B');
  t.equal(restarted.admit('tools', 'sess-1', 'key-a'), 'admitted', 'and admits key A');
  restarted.forget('tools', 'sess-1');
  t.equal(open(t, dir).owners.admit('tools', 'sess-1', 'key-a'), 'refused', 'a forgotten session is refused by every instance, to its owner too');
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

t.test('the table keeps its bound across instances, dropping the binding used least recently', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const a = open(t, dir, { max: 3, clock });
  const b = open(t, dir, { max: 3, clock });
  t.equal(a.owners.bind('tools', 's1', 'key-b'), 'bound');
  t.equal(b.owners.bind('tools', 's1', 'key-a'), 'taken', 'an id another key holds is not rebound, on any instance');
  t.equal(a.owners.bind('tools', 's1', 'key-b'), 'bound', 'its owner may bind it again');
  t.equal(a.store.size(), 1, 'one row per session');
  clock.advance(1);
  a.owners.bind('tools', 's2', 'key-a');
  clock.advance(1);
  b.owners.bind('tools', 's3', 'key-a');
  t.equal(b.store.size(), 3, 'at the bound nothing went');

  clock.advance(TOUCH_EVERY_MS - 3);
  t.equal(b.owners.admit('tools', 's1', 'key-b'), 'admitted', 'the owner uses s1 within a minute');
  t.equal(a.store.get(sessionEntry('tools', 's1'))?.lastUsedMs, T0, 'a use within a minute of the last writes nothing');
  clock.advance(3);
  t.equal(b.owners.admit('tools', 's1', 'key-b'), 'admitted', 'the owner uses s1 a minute after the last recorded use');
  t.equal(a.store.get(sessionEntry('tools', 's1'))?.lastUsedMs, clock.ms, 'a use a minute later is recorded: s1 is now the most recent');

  clock.advance(1);
  a.owners.bind('tools', 's4', 'key-a');
  t.equal(a.store.size(), 3, 'one binding went');
  t.equal(b.owners.admit('tools', 's2', 'key-a'), 'refused', 's2, used least recently, went: refused, to its owner too');
  t.equal(b.owners.admit('tools', 's1', 'key-a'), 'refused', 's1 kept its owner');
  t.equal(b.owners.admit('tools', 's3', 'key-b'), 'refused', 's3 kept its owner');
  t.equal(b.owners.admit('tools', 's4', 'key-b'), 'refused', 's4 is bound');

  clock.advance(1);
  b.owners.bind('tools', 's5', 'key-b');
  t.equal(a.store.size(), 3, 'a binding made on the other instance keeps the same bound');
  t.equal(a.owners.admit('tools', 's3', 'key-a'), 'refused', 's3 went next');
  t.equal(a.owners.admit('tools', 's5', 'key-b'), 'admitted', 's5 is bound');
});

t.test('a file locked by another process fails closed: a binding not written refuses its session, and a failed touch pauses touches instead of stalling every call', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const warnings: string[] = [];
  const logger = { warn: (_: unknown, msg: string) => warnings.push(msg) } as unknown as Logger;
  const store = new SqliteSessionOwnerStore({ stateDir: dir, clock });
  t.teardown(() => store.close());
  const owners = new SessionOwners(store, logger);
  t.equal(owners.bind('tools', 'open-before', 'key-a'), 'bound');
  clock.advance(TOUCH_EVERY_MS);
  // Another connection holds the write lock (a backup, an operator's shell).
  const holder = new Database(path.join(dir, SESSION_OWNER_FILE));
  t.teardown(() => holder.close());
  holder.prepare('BEGIN IMMEDIATE').run();
  t.equal(owners.bind('tools', 'opened-while-locked', 'key-a'), 'failed', 'the binding cannot be written (mcp-call.ts refuses the initialize)');
  t.equal(owners.admit('tools', 'opened-while-locked', 'key-a'), 'refused', 'the binding was not written: the session is refused');
  t.equal(owners.admit('tools', 'opened-while-locked', 'key-b'), 'refused', 'to every key');
  t.equal(warnings.length, 1, 'the failed write is logged');
  const started = Date.now();
  for (let i = 0; i < 20; i++) t.equal(owners.admit('tools', 'open-before', 'key-a'), 'admitted', 'a bound session is still served while its touch cannot be written');
  t.equal(warnings.length, 2, 'one failed touch, then touches pause: no warning (and no busy wait) per call');
  t.comment(`20 admits while locked: ${Date.now() - started} ms`);
  holder.prepare('COMMIT').run();
});

t.test('a binding that cannot be read admits nobody, and says so apart from a refusal', async (t) => {
  const warnings: string[] = [];
  const logger = { warn: (_: unknown, msg: string) => warnings.push(msg) } as unknown as Logger;
  const store = new MemorySessionOwnerStore();
  const owners = new SessionOwners(store, logger);
  owners.bind('tools', 's1', 'key-a');
  store.get = () => {
    throw new Error('SQLITE_IOERR: disk I/O error');
  };
  t.equal(owners.admit('tools', 's1', 'key-a'), 'unreadable', 'nobody is admitted (mcp-call.ts answers a retryable 503), and no 404 makes the client drop its session');
  t.match(warnings, [/could not be read/]);
});

t.test('a session file that is not a database leaves the node serving, with the table in memory and the file named in the error', async (t) => {
  const dir = t.testdir({ [SESSION_OWNER_FILE]: 'this is not an SQLite database, it was overwritten'.repeat(100) });
  const errors: Array<{ obj: Record<string, unknown>; msg: string }> = [];
  const logger = { error: (obj: Record<string, unknown>, msg: string) => errors.push({ obj, msg }), warn: () => undefined } as unknown as Logger;
  const owners = openSessionOwners(dir, logger);
  t.teardown(() => owners.close());
  t.equal(errors.length, 1);
  t.match(errors[0]?.msg, new RegExp(`${SESSION_OWNER_FILE} could not be opened.*move the file aside`));
  owners.bind('tools', 's1', 'key-a');
  t.equal(owners.admit('tools', 's1', 'key-a'), 'admitted', 'bindings still work, in memory');
  t.equal(owners.admit('tools', 's1', 'key-b'), 'refused', 'and still refuse other keys');
});

