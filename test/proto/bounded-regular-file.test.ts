// readRegularFileWithin: the one bounded read the installer, the node (`serve --config`) and the
// control plane (TLS setting files) share. Each words its own errors from the outcome, so what is
// held here is the outcome: a regular file read whole, anything else refused unread, with its reason.
import { execFileSync, spawnSync } from 'node:child_process';
import { symlinkSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import t from 'tap';
import { readRegularFileWithin } from '../../proto/src/bounded-regular-file.js';

const MODULE_URL = pathToFileURL(path.resolve(import.meta.dirname, '../../proto/src/bounded-regular-file.ts')).href;
const TSX_URL = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
/** A refusal comes at once; a child still reading after this is blocked on the FIFO. */
const DEADLINE_MS = 20_000;

/**
 * The read in a child process with a deadline: a read that blocks fails the test instead of hanging
 * it. `readerLeft`: whether, after the read, the child still held `file` open for reading (a FIFO
 * with a reader lets a non-blocking writer open it; with none the open fails with ENXIO).
 */
function readInChild(file: string, maxBytes: number): { timedOut: boolean; outcome?: unknown; readerLeft?: boolean } {
  const script = [
    `const { closeSync, constants, openSync } = await import('node:fs');`,
    `const m = await import(${JSON.stringify(MODULE_URL)});`,
    `const outcome = m.readRegularFileWithin(${JSON.stringify(file)}, ${maxBytes});`,
    `let readerLeft = true;`,
    `try { closeSync(openSync(${JSON.stringify(file)}, constants.O_WRONLY | constants.O_NONBLOCK)); } catch (err) { readerLeft = err.code !== 'ENXIO'; }`,
    `process.stdout.write(JSON.stringify({ outcome, readerLeft }));`,
  ].join('\n');
  const child = spawnSync(process.execPath, ['--import', TSX_URL, '--input-type=module', '-e', script], { timeout: DEADLINE_MS, encoding: 'utf8', killSignal: 'SIGKILL' });
  if (child.error && (child.error as NodeJS.ErrnoException).code === 'ETIMEDOUT') return { timedOut: true };
  if (child.status !== 0) throw new Error(`the child failed (${child.status}): ${child.stderr}`);
  return { timedOut: false, ...(JSON.parse(child.stdout) as { outcome: unknown; readerLeft: boolean }) };
}

t.test('a regular file within the limit is read whole as UTF-8, one exactly at the limit too', async (t) => {
  const dir = t.testdir({ 'small.pem': 'héllo ✓\n', 'exact.pem': 'x'.repeat(1024), 'empty.pem': '' });
  t.same(readRegularFileWithin(path.join(dir, 'small.pem'), 1024), { ok: true, text: 'héllo ✓\n' });
  t.same(readRegularFileWithin(path.join(dir, 'exact.pem'), 1024), { ok: true, text: 'x'.repeat(1024) });
  t.same(readRegularFileWithin(path.join(dir, 'empty.pem'), 1024), { ok: true, text: '' });
});

t.test('a file one byte past the limit is refused as too-large, naming the path and the limit', async (t) => {
  const dir = t.testdir({ 'big.pem': 'x'.repeat(1025) });
  const file = path.join(dir, 'big.pem');
  t.same(readRegularFileWithin(file, 1024), { ok: false, reason: 'too-large', file, maxBytes: 1024 });
});

t.test('a FIFO with no writer is refused at once as not-regular, and is left with no reader', async (t) => {
  const dir = t.testdir({});
  const fifo = path.join(dir, 'named.fifo');
  execFileSync('mkfifo', [fifo]);
  // In a child only: were it to block, this process would wait for ever too.
  const { timedOut, outcome, readerLeft } = readInChild(fifo, 1024);
  t.notOk(timedOut, `answered within ${DEADLINE_MS} ms, not blocked waiting for a writer`);
  t.same(outcome, { ok: false, reason: 'not-regular', file: fifo, maxBytes: 1024, fileType: 'fifo' });
  t.equal(readerLeft, false, 'nothing holds the FIFO open after the refusal');
});

t.test('a device (/dev/zero, size 0) and a directory are refused unread as not-regular, saying what they are', async (t) => {
  const dir = t.testdir({});
  t.same(readRegularFileWithin('/dev/zero', 1024), { ok: false, reason: 'not-regular', file: '/dev/zero', maxBytes: 1024, fileType: 'character-device' });
  t.same(readRegularFileWithin(dir, 1024), { ok: false, reason: 'not-regular', file: dir, maxBytes: 1024, fileType: 'directory' });
});

t.test('a missing file is refused as missing with ENOENT and the error fs threw', async (t) => {
  const dir = t.testdir({});
  const file = path.join(dir, 'absent.pem');
  const outcome = readRegularFileWithin(file, 1024);
  t.match(outcome, { ok: false, reason: 'missing', file, maxBytes: 1024, code: 'ENOENT' });
  t.match(outcome.ok ? undefined : outcome, { error: { code: 'ENOENT', message: `ENOENT: no such file or directory, stat '${file}'` } });
});

t.test('a path that cannot be looked up otherwise is refused as unreadable with its errno code', async (t) => {
  const dir = t.testdir({ 'file.pem': 'x' });
  const file = path.join(dir, 'file.pem', 'child');
  t.match(readRegularFileWithin(file, 1024), { ok: false, reason: 'unreadable', file, code: 'ENOTDIR', error: { code: 'ENOTDIR' } });
});

t.test('symbolic links are followed, as before: judged and read by what they point at', async (t) => {
  const dir = t.testdir({ 'target.pem': 'through the link', sub: {} });
  const fifo = path.join(dir, 'named.fifo');
  execFileSync('mkfifo', [fifo]);
  const link = (name: string, target: string): string => {
    const at = path.join(dir, name);
    symlinkSync(target, at);
    return at;
  };
  t.same(readRegularFileWithin(link('to-file', path.join(dir, 'target.pem')), 1024), { ok: true, text: 'through the link' });
  const toDir = link('to-dir', path.join(dir, 'sub'));
  t.same(readRegularFileWithin(toDir, 1024), { ok: false, reason: 'not-regular', file: toDir, maxBytes: 1024, fileType: 'directory' });
  const toFifo = link('to-fifo', fifo);
  const { timedOut, outcome } = readInChild(toFifo, 1024);
  t.notOk(timedOut, 'a link to a FIFO does not block either');
  t.same(outcome, { ok: false, reason: 'not-regular', file: toFifo, maxBytes: 1024, fileType: 'fifo' });
  const dangling = link('dangling', path.join(dir, 'gone.pem'));
  t.match(readRegularFileWithin(dangling, 1024), { ok: false, reason: 'missing', file: dangling, code: 'ENOENT' });
  link('loop-a', path.join(dir, 'loop-b'));
  const loop = link('loop-b', path.join(dir, 'loop-a'));
  t.match(readRegularFileWithin(loop, 1024), { ok: false, reason: 'unreadable', file: loop, code: 'ELOOP' });
});
