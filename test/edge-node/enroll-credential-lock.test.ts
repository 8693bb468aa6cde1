// `zenova-node enroll` writes credential.json under the lock a serving node's rotation
// compare-and-swap takes (config-apply.lock): a rotation the node checked against the old file and
// stores while the enrollment's answer arrives must not be overwritten by it unseen, nor land over
// the new credential. The enrollment waits for a node holding the lock, with a bound and a clear
// error past it. As root in a state dir of the node's user, it takes the lock and writes as that
// user: a symbolic link the user swaps in for the lock file reaches nothing root's, and the files
// written are the node's. Real files, a real HTTPS control plane stand-in, SQLite's own lock.
import { fork, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmod, chown, lstat, mkdir, readdir, readFile, stat, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import { enroll } from '../../edge-node/src/enroll/enroll.js';
import type { EnrollOptions } from '../../edge-node/src/enroll/enroll.js';
import { EnrollError } from '../../edge-node/src/enroll/enroll-errors.js';
import { loadCredentials, storeRotatedCredential, storeRotatedCredentialIfUnchanged } from '../../edge-node/src/state/credential-store.js';
import { openStateStore } from '../../edge-node/src/state/state-store.js';
import { waitFor } from '../fixtures/wait-for.js';
import { startEnrollServer } from './enroll-fixtures.js';
import type { EnrollServer } from './enroll-fixtures.js';

const TOKEN = 'zn_rt_Q2hlY2tUaGVUb2tlbk5ldmVyQXBwZWFyc0luT3V0cHV0MDEyMw';
const NODE_ID = randomUUID();
const NODE_USER = 65534;
const CHILD = fileURLToPath(new URL('./credential-rotation-child.ts', import.meta.url));
const SWAP_CHILD = fileURLToPath(new URL('./lock-swap-child.ts', import.meta.url));
const asRoot = process.getuid?.() !== 0 ? 'needs root (a state dir of another user)' : false;

const options = (server: EnrollServer, stateDir: string, reenroll: boolean, more: Partial<EnrollOptions> = {}): EnrollOptions => ({
  controlPlaneUrl: server.url, token: TOKEN, stateDir, caPem: server.ca.certPem, reenroll, ...more,
});

/** Holds the state dir's lock as a node-edge process does mid-store: SQLite's exclusive lock on the file. */
function holdLock(lockFile: string): { release(): void } {
  const db = new Database(lockFile);
  db.pragma('journal_mode = MEMORY');
  db.exec('BEGIN EXCLUSIVE');
  return { release: () => { db.exec('ROLLBACK'); db.close(); } };
}

const rotated = () => ({ id: randomUUID(), secret: `rotated.${randomUUID()}`, expiresAt: new Date(Date.now() + 86_400_000).toISOString() });
const modeOf = async (file: string): Promise<number> => (await stat(file)).mode & 0o777;

t.test('a re-enrollment waits while a serving node holds the lock to store a rotation, writes after it, and the rotation checked against the old file is then refused', async (t) => {
  const server = await startEnrollServer(t, { nodeId: () => NODE_ID });
  const stateDir = path.join(t.testdir({}), 'state');
  await enroll(options(server, stateDir, false));
  const store = await openStateStore(stateDir, { create: false });
  const before = (await loadCredentials(store))!;
  const lockFile = path.join(stateDir, 'config-apply.lock');

  // The node's session is storing a rotation: it holds the lock and has checked the old file.
  // The lock file's mode made 0644 shows when the enrollment tries the lock (each try sets 0600).
  await writeFile(lockFile, '', { flag: 'a' });
  await chmod(lockFile, 0o644);
  const node = holdLock(lockFile);
  let settled = false;
  const reenrolling = enroll(options(server, stateDir, true)).finally(() => (settled = true));
  await waitFor(async () => (await modeOf(lockFile)) === 0o600, { what: 'the re-enrollment trying the lock' });
  const nodeRotation = rotated();
  await storeRotatedCredential(store, nodeRotation, before.current);
  t.notOk(settled, 'the re-enrollment is still waiting for the lock');
  t.equal((await loadCredentials(store))!.current.id, nodeRotation.id, 'the enrollment has not written while the node held the lock');
  node.release();

  const result = await reenrolling;
  t.equal(result.nodeId, NODE_ID);
  const enrolled = (await loadCredentials(store))!;
  t.equal(enrolled.current.secret, server.lastCredential(), 'credential.json holds the re-enrollment’s credential, written after the node’s store');
  t.equal(enrolled.previous, undefined);

  // Another rotation the old session checked against the file it started from lands nowhere.
  const late = await storeRotatedCredentialIfUnchanged(store, rotated(), before.current, before);
  t.match(late, { stored: false, reason: /changed since this session started/ });
  t.equal((await loadCredentials(store))!.current.secret, server.lastCredential(), 'the new credential stays');
});

t.test('a lock held past the bound fails the re-enrollment with STATE_LOCKED naming the lock, nothing saved, and the same command then succeeds', async (t) => {
  const server = await startEnrollServer(t, { nodeId: () => NODE_ID });
  const stateDir = path.join(t.testdir({}), 'state');
  await enroll(options(server, stateDir, false));
  const store = await openStateStore(stateDir, { create: false });
  const before = (await loadCredentials(store))!;
  const identityBefore = await readFile(path.join(stateDir, 'identity.json'), 'utf8');
  const lockFile = path.join(stateDir, 'config-apply.lock');

  const node = holdLock(lockFile);
  const err = await enroll(options(server, stateDir, true, { lockWaitMs: 300 })).then(() => undefined, (e: unknown) => e);
  node.release();
  t.ok(err instanceof EnrollError, 'an EnrollError');
  t.equal((err as EnrollError | undefined)?.code, 'STATE_LOCKED');
  t.equal(
    (err as EnrollError | undefined)?.message,
    `${lockFile} stayed locked for over 0.3 s (a node-edge process serving from ${stateDir} holds it for moments while it stores a rotated credential or applies a config; one stopped while holding it keeps it): ` +
      `the token was redeemed but nothing was saved in ${stateDir}. Run the same command again within 15 minutes, or issue a new reenroll command`,
  );
  t.same(await loadCredentials(store), before, 'credential.json unchanged');
  t.equal(await readFile(path.join(stateDir, 'identity.json'), 'utf8'), identityBefore, 'identity.json unchanged');
  t.ok(await stat(path.join(stateDir, 'enroll-attempt.json')), 'the attempt is kept for a rerun');

  await enroll(options(server, stateDir, true, { lockWaitMs: 300 }));
  t.equal((await loadCredentials(store))!.current.secret, server.lastCredential(), 'the rerun saved');
  const keys = server.requests.filter((r) => r.method === 'POST').map((r) => (r.body as { redemptionKey?: string }).redemptionKey);
  t.equal(keys[1], keys[2], 'the rerun sent the same redemption key');
});

/** A state dir of the node's user (uid 65534) in a test dir it may enter. */
async function nodeUserStateDir(t: Test, files: Record<string, string> = {}): Promise<{ dir: string; stateDir: string }> {
  const dir = t.testdir(files);
  await chmod(dir, 0o755);
  const stateDir = path.join(dir, 'state');
  await mkdir(stateDir, { mode: 0o700 });
  await chown(stateDir, NODE_USER, NODE_USER);
  return { dir, stateDir };
}

/** Runs credential-rotation-child.ts as the node's user: its rotation store, under the lock. */
function rotateAsNodeUser(stateDir: string): { outcome: { stored?: boolean; current?: string; next?: string; error?: string }; output: string } {
  const child = spawnSync(process.execPath, ['--import', 'tsx', CHILD, stateDir], { uid: NODE_USER, gid: NODE_USER, encoding: 'utf8', timeout: 60_000, env: { PATH: process.env.PATH ?? '', HOME: '/tmp' } });
  const line = child.stdout.split('\n').find((l) => l.startsWith('{'));
  return { outcome: JSON.parse(line ?? '{}') as { stored?: boolean; current?: string; next?: string; error?: string }, output: `${child.stdout}${child.stderr}` };
}

const ownerOf = async (file: string): Promise<{ uid: number; gid: number; mode: number; file: boolean }> => {
  const info = await lstat(file);
  return { uid: info.uid, gid: info.gid, mode: info.mode & 0o777, file: info.isFile() };
};

t.test('as root in a state dir of the node’s user, credential.json, identity.json and the lock file are that user’s, and the node reads them and takes the lock', { skip: asRoot }, async (t) => {
  const server = await startEnrollServer(t, { nodeId: () => NODE_ID });
  const { stateDir } = await nodeUserStateDir(t);
  const theNodes = { uid: NODE_USER, gid: NODE_USER, mode: 0o600, file: true };

  await enroll(options(server, stateDir, false));
  t.same(await ownerOf(path.join(stateDir, 'config-apply.lock')), theNodes, 'the lock file: the state dir’s owner and group, 0600');
  t.same(await ownerOf(path.join(stateDir, 'credential.json')), theNodes, 'credential.json is the node user’s, not root’s');
  t.same(await ownerOf(path.join(stateDir, 'identity.json')), theNodes, 'identity.json is the node user’s, not root’s');

  // No chown needed: the node's user reads credential.json and takes the lock for its rotation.
  const { outcome, output } = rotateAsNodeUser(stateDir);
  t.equal(outcome.error, undefined, `the node’s user reads credential.json and takes the lock (${output})`);
  t.equal(outcome.stored, true, 'and stores its rotation');
  t.equal(outcome.current, outcome.next);
});

t.test('as root in a state dir of the node’s user, the attempt file a re-enrollment keeps when the lock stays held is that user’s', { skip: asRoot }, async (t) => {
  const server = await startEnrollServer(t, { nodeId: () => NODE_ID });
  const { stateDir } = await nodeUserStateDir(t);
  await enroll(options(server, stateDir, false));

  const node = holdLock(path.join(stateDir, 'config-apply.lock'));
  const err = await enroll(options(server, stateDir, true, { lockWaitMs: 300 })).then(() => undefined, (e: unknown) => e);
  node.release();
  t.match(err, { code: 'STATE_LOCKED' });
  t.same(await ownerOf(path.join(stateDir, 'enroll-attempt.json')), { uid: NODE_USER, gid: NODE_USER, mode: 0o600, file: true });
});

t.test('as root in a state dir of the node’s user, a re-enrollment as another node moves the old state into a retired/ directory of that user', { skip: asRoot }, async (t) => {
  let answerId = NODE_ID;
  const server = await startEnrollServer(t, { nodeId: () => answerId });
  const { stateDir } = await nodeUserStateDir(t);
  await enroll(options(server, stateDir, false));

  answerId = randomUUID();
  const result = await enroll(options(server, stateDir, true));
  t.ok(result.retired, 'the old node’s state was moved aside');
  const retired = path.join(stateDir, 'retired');
  t.match(await ownerOf(retired), { uid: NODE_USER, gid: NODE_USER, file: false }, 'retired/ is the node user’s');
  const entries = await readdir(retired);
  t.equal(entries.length, 1, 'one directory of the old node’s state');
  for (const entry of entries) t.match(await ownerOf(path.join(retired, entry)), { uid: NODE_USER, gid: NODE_USER }, `retired/${entry} is the node user’s`);
  t.same(await ownerOf(path.join(stateDir, 'identity.json')), { uid: NODE_USER, gid: NODE_USER, mode: 0o600, file: true }, 'the new identity.json is the node user’s');
});

t.test('as root in a state dir of the node’s user, a lock file that is a symbolic link is refused and its target left alone', { skip: asRoot }, async (t) => {
  const server = await startEnrollServer(t, { nodeId: () => NODE_ID });
  const { dir, stateDir } = await nodeUserStateDir(t, { 'target.txt': 'not a lock' });
  const target = path.join(dir, 'target.txt');
  await chmod(target, 0o644);
  await symlink(target, path.join(stateDir, 'config-apply.lock'));

  const err = await enroll(options(server, stateDir, false)).then(() => undefined, (e: unknown) => e);
  t.match(err, { code: 'STATE_LOCK_UNSAFE', message: /config-apply\.lock is not a regular file, so it is not taken as the lock; remove it/ });
  t.equal(await readFile(target, 'utf8'), 'not a lock', 'the target keeps its content');
  t.equal(await modeOf(target), 0o644, 'and its mode');
  t.equal(await loadCredentials(await openStateStore(stateDir, { create: false })), undefined, 'nothing was saved');
});

t.test('as root in a state dir of the node’s user, a symbolic link the user swaps in for the held lock file leaves the root file it points at unchanged', { skip: asRoot }, async (t) => {
  const server = await startEnrollServer(t, { nodeId: () => NODE_ID });
  const { dir, stateDir } = await nodeUserStateDir(t, { 'victim.txt': 'root-only content\n' });
  const victim = path.join(dir, 'victim.txt');
  await chmod(victim, 0o644);
  const lockFile = path.join(stateDir, 'config-apply.lock');

  const child = fork(SWAP_CHILD, [lockFile, victim], { uid: NODE_USER, gid: NODE_USER, execArgv: ['--import', 'tsx'], env: { PATH: process.env.PATH ?? '', HOME: '/tmp' }, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  t.teardown(async () => {
    child.kill();
    await exited;
  });
  const messages: unknown[] = [];
  child.on('message', (m) => messages.push(m));
  await waitFor(() => messages.includes('held'), { what: 'the node’s user holding the lock', timeoutMs: 60_000 }).catch((err: Error) => {
    throw new Error(`${err.message}; the child wrote: ${output}`);
  });

  const enrolling = enroll(options(server, stateDir, false, { lockWaitMs: 20_000 })).then(() => undefined, (e: unknown) => e);
  await waitFor(async () => (await modeOf(lockFile)) === 0o600, { what: 'the enrollment trying the lock' });
  child.send('swap');
  await waitFor(() => messages.includes('swapped'), { what: 'the symbolic link swapped in' });

  const err = await enrolling;
  t.equal(await readFile(victim, 'utf8'), 'root-only content\n', 'the root file keeps its content (not truncated)');
  t.equal(await modeOf(victim), 0o644, 'and its mode (not chmodded 0600)');
  t.same((await stat(victim)).uid, 0, 'and stays root’s');
  t.match(err, { code: 'STATE_LOCK_FAILED', message: /cannot take the lock .*config-apply\.lock \(.*(EPERM|is a symbolic link)/ }, 'the enrollment cannot take a lock it may not chmod, and says so');
  t.equal(await loadCredentials(await openStateStore(stateDir, { create: false })), undefined, 'nothing was saved');
});
