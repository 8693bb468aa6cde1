// control-status.json and spool.json are written atomically (temp file + rename) without a lock
// replicas share, so a crash mid-write left `.control-status.json.<12 hex>.tmp` or
// `.spool.json.<12 hex>.tmp` in the state dir for good: no start removed them. A start now removes
// those over an hour old (no write holds its temp file that long), and keeps a live replica's write
// in progress; and the temp files of config-applied-version.json, now written only under
// config-apply.lock, with the others swept under it, whatever their age.
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import type { Test } from 'tap';
import { loadEnrolledConfig } from '../../edge-node/src/config/enrolled-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import type { NodeIdentity } from '../../edge-node/src/state/identity.js';
import { waitFor } from '../fixtures/wait-for.js';
import { createSigner } from './config-fixtures.js';

const NODE_ID = 'node-under-test';
const STALLED_CHILD = fileURLToPath(new URL('./state-write-stalled-child.ts', import.meta.url));
/** Past the hour after which a temp file of a write made without a shared lock counts as abandoned. */
const OVER_AN_HOUR_AGO = (): Date => new Date(Date.now() - 61 * 60 * 1000);

function identityFor(publicKeyPem: string): NodeIdentity {
  return {
    nodeId: NODE_ID,
    nodeName: 'edge-test',
    controlPlaneUrl: 'https://cp.example:8443',
    gateway: { target: '127.0.0.1:1', serverName: 'localhost', caPem: publicKeyPem },
    configSigningPublicKeyPem: publicKeyPem,
    enrolledAt: new Date().toISOString(),
  };
}

/** A replica stalled between writing its temp files and renaming them; `kill` is a kill -9 mid-write. */
async function stalledWriter(t: Test, stateDir: string): Promise<{ kill: () => Promise<void> }> {
  const child = fork(STALLED_CHILD, [stateDir], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const kill = async (): Promise<void> => {
    child.kill('SIGKILL');
    await exited;
  };
  t.teardown(kill);
  let written = false;
  child.on('message', (m) => (written ||= m === 'written'));
  await waitFor(() => written, { what: 'the child writing its temp files', timeoutMs: 60_000 }).catch((err: Error) => {
    throw new Error(`${err.message}; the child wrote: ${output}`);
  });
  return { kill };
}

/** The temp files in the state dir's root, as writeFileAtomic names them. */
const tempFiles = (dir: string): string[] => readdirSync(dir).filter((entry) => /^\.(control-status|spool)\.json\.[0-9a-f]{12}\.tmp$/.test(entry));

t.test('a node start removes the temp files a replica killed over an hour ago left mid-write of control-status.json and spool.json, and keeps those of a replica still writing', async (t) => {
  const stateDir = t.testdir({});
  const identity = identityFor(createSigner().publicKeyPem);
  const crashed = await stalledWriter(t, stateDir);
  const leftovers = tempFiles(stateDir);
  await crashed.kill();
  t.equal(leftovers.length, 2, 'the killed replica left a temp file of each');
  for (const name of leftovers) utimesSync(path.join(stateDir, name), OVER_AN_HOUR_AGO(), OVER_AN_HOUR_AGO());
  await stalledWriter(t, stateDir);
  const inProgress = tempFiles(stateDir).filter((name) => !leftovers.includes(name));
  t.equal(inProgress.length, 2, 'the live replica is mid-write of each');

  const lines: Record<string, unknown>[] = [];
  const logger = createLogger({ level: 'info', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) } });
  await loadEnrolledConfig(stateDir, identity, logger);

  for (const name of leftovers) t.notOk(existsSync(path.join(stateDir, name)), `the killed replica's ${name} is removed`);
  for (const name of inProgress) t.ok(existsSync(path.join(stateDir, name)), `the live replica's ${name} is kept`);
  const removedLine = lines.find((line) => Array.isArray(line.files));
  t.same(new Set(removedLine?.files as string[]), new Set(leftovers), 'the removal is logged, naming the files');
});

t.test('a node start keeps recent temp files of control-status.json and spool.json and anything not named as writeFileAtomic names them, and removes those of config-applied-version.json whatever their age', async (t) => {
  const stateDir = t.testdir({});
  const identity = identityFor(createSigner().publicKeyPem);
  const hex = (): string => randomBytes(6).toString('hex');
  const removed = [
    `.control-status.json.${hex()}.tmp`,
    `.spool.json.${hex()}.tmp`,
    // Written only under config-apply.lock: swept under it, however recent.
    `.config-applied-version.json.${hex()}.tmp`,
  ];
  const oldKept = [`.spool.json.notes.tmp`, `.spool.json.ABCDEF012345.tmp`, `.spool-other.json.${hex()}.tmp`, 'spool.json.bak'];
  const recentKept = [`.control-status.json.${hex()}.tmp`, `.spool.json.${hex()}.tmp`];
  for (const name of [...removed, ...oldKept, ...recentKept]) writeFileSync(path.join(stateDir, name), '{"spoolId":', { mode: 0o600 });
  // A directory named like a temp file is not something writeFileAtomic left.
  const dirLikeTemp = `.spool.json.${hex()}.tmp`;
  mkdirSync(path.join(stateDir, dirLikeTemp));
  for (const name of [...removed.slice(0, 2), ...oldKept, dirLikeTemp]) utimesSync(path.join(stateDir, name), OVER_AN_HOUR_AGO(), OVER_AN_HOUR_AGO());

  await loadEnrolledConfig(stateDir, identity, createLogger({ level: 'silent' }));

  for (const name of removed) t.notOk(existsSync(path.join(stateDir, name)), `${name} is removed`);
  for (const name of [...oldKept, ...recentKept, dirLikeTemp]) t.ok(existsSync(path.join(stateDir, name)), `${name} is kept`);
});
