// Child process of enroll-credential-lock.test.ts, run as the state dir's owner (not root): holds
// config-apply.lock (argv[2]) as a node-edge process does mid-store, says 'held'; on 'swap' puts a
// symbolic link to argv[3] in the lock file's place (the held lock stays on the old file), says
// 'swapped' and exits. What a node's user could do to a root enrollment waiting for the lock.
import { renameSync, symlinkSync, writeFileSync } from 'node:fs';
import Database from 'better-sqlite3';

const [lockFile, target] = [process.argv[2] ?? '', process.argv[3] ?? ''];
const send = (message: string): void => {
  process.send?.(message);
};

// 0644: the enrollment's first try of the lock sets 0600, which the test waits for.
writeFileSync(lockFile, '', { mode: 0o644 });
const db = new Database(lockFile);
db.pragma('journal_mode = MEMORY');
db.exec('BEGIN EXCLUSIVE');
process.on('message', (message) => {
  if (message !== 'swap') return;
  symlinkSync(target, `${lockFile}.swap`);
  renameSync(`${lockFile}.swap`, lockFile);
  send('swapped');
  process.disconnect?.();
});
send('held');
