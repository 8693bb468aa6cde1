// A crash (kill -9, power loss) while the node writes config/current.json or previous.json (or
// credential.json, identity.json, config-applied-version.json) leaves writeFileAtomic's temp file
// `.<name>.[<writer>.]<12 hex>.tmp` beside it, holding part of a bundle (upstream secrets) or a
// credential. Nothing removed it, neither a restart nor later writes. A node start now removes
// exactly those temp files, under config-apply.lock, and keeps everything else.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { loadEnrolledConfig } from '../../edge-node/src/config/enrolled-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { underOpenLockAsync } from '../../edge-node/src/state/open-lock.js';
import { signedConfigNode } from './signed-config-node.js';

/** A temp file name as writeFileAtomic makes it for `name`. */
const tempOf = (name: string): string => `.${name}.${randomBytes(6).toString('hex')}.tmp`;

t.test('a node start removes the temp files a crash left mid-write of the config cache, the credential and the applied-version mark, and nothing else', async (t) => {
  const stateDir = t.testdir({});
  const { identity, push } = signedConfigNode();
  const first = await loadEnrolledConfig(stateDir, identity, createLogger({ level: 'silent' }));
  t.match(await first.applier.apply(push(5)), { ok: true, version: 5 });

  const configDir = path.join(stateDir, 'config');
  mkdirSync(configDir, { recursive: true });
  const leftovers = [path.join('config', tempOf('current.json')), path.join('config', tempOf('previous.json')), tempOf('credential.json'), tempOf('identity.json'), tempOf('config-applied-version.json')];
  const kept = [
    // Not a name writeFileAtomic makes, or not a file it writes under config-apply.lock.
    path.join('config', '.current.json.notes.tmp'),
    path.join('config', '.current.json.ABCDEF012345.tmp'),
    path.join('config', `.current.json.${randomBytes(7).toString('hex')}.tmp`),
    path.join('config', `.other.json.${randomBytes(6).toString('hex')}.tmp`),
    path.join('config', 'operator-notes.txt'),
    // Written without config-apply.lock: a recent one may be a write in progress (state-temp-sweep.test.ts).
    tempOf('control-status.json'),
    'unrelated.json',
  ];
  for (const name of [...leftovers, ...kept]) writeFileSync(path.join(stateDir, name), '{"version":6,"bundle":"{\\"upstreams\\":[{\\"apiKey\\":"', { mode: 0o600 });
  // A directory named like a temp file is not something writeFileAtomic left.
  const dirLikeTemp = path.join('config', tempOf('current.json'));
  mkdirSync(path.join(stateDir, dirLikeTemp));

  const lines: Record<string, unknown>[] = [];
  const logger = createLogger({ level: 'info', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) } });
  const restarted = await loadEnrolledConfig(stateDir, identity, logger);

  for (const name of leftovers) t.notOk(existsSync(path.join(stateDir, name)), `${name} is removed`);
  for (const name of [...kept, dirLikeTemp]) t.ok(existsSync(path.join(stateDir, name)), `${name} is kept`);
  t.ok(existsSync(path.join(configDir, 'current.json')), 'current.json is kept');
  t.equal(restarted.holder.appliedVersion(), 5, 'the cache still loads');

  const removedLine = lines.find((line) => Array.isArray(line.files));
  t.ok(removedLine, 'the removal is logged');
  t.equal(removedLine?.level, 30, 'at info level');
  t.same(new Set(removedLine?.files as string[]), new Set(leftovers.map((name) => name.split(path.sep).join('/'))), 'naming the files removed, relative to the state dir');
  t.notOk(JSON.stringify(removedLine).includes(stateDir), 'with no absolute path');
});

t.test('a node start with no config cache yet removes nothing and starts', async (t) => {
  const stateDir = t.testdir({ 'unrelated.json': '{}' });
  const { identity } = signedConfigNode();
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger({ level: 'info', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) } });
  const started = await loadEnrolledConfig(stateDir, identity, logger);
  t.equal(started.holder.current().ready, false);
  t.ok(existsSync(path.join(stateDir, 'unrelated.json')));
  t.notOk(
    lines.some((line) => String(line.msg).includes('interrupted state writes')),
    'no removal logged, and no failed sweep',
  );
});

t.test('a node start does not remove the temp file of a write another replica makes under config-apply.lock', async (t) => {
  const stateDir = t.testdir({});
  const { identity } = signedConfigNode();
  const inProgress = path.join(stateDir, tempOf('credential.json'));
  let starting: Promise<unknown> | undefined;
  await underOpenLockAsync(path.join(stateDir, 'config-apply.lock'), async () => {
    // A replica's writeFileAtomic of credential.json, between writing its temp file and the rename.
    writeFileSync(inProgress, '{"current":', { mode: 0o600 });
    starting = loadEnrolledConfig(stateDir, identity, createLogger({ level: 'silent' }));
    // Time enough for a start that did not wait for the lock to list and remove files; a start that
    // waits cannot get past the lock before this callback returns, however long this is.
    const settled = await Promise.race([starting.then(() => 'started'), new Promise((resolve) => setTimeout(resolve, 500, 'waiting'))]);
    t.equal(settled, 'waiting', 'the start waits for the lock');
    t.ok(existsSync(inProgress), 'the temp file of the write in progress is still there');
    renameSync(inProgress, path.join(stateDir, 'credential.json'));
  });
  await starting;
  t.ok(existsSync(path.join(stateDir, 'credential.json')), 'the write completed');
});
