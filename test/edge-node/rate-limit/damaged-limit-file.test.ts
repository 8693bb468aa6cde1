// rate-limits.sqlite is written with synchronous=OFF, so an OS crash may leave it damaged. It holds
// only the counters of the current minutes: a damaged one is moved aside (kept) and
// made anew, logged naming both, and the node serves on; replicas starting at once on it share the
// new file; a file that cannot be used at all leaves the replica counting in memory, never exiting.
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import t from 'tap';
import { createNodeRateLimiter } from '../../../edge-node/src/rate-limit/create-node-rate-limiter.js';
import { rateLimitOpenLockFile } from '../../../edge-node/src/rate-limit/rate-limit-file.js';
import { RATE_LIMIT_FILE } from '../../../edge-node/src/rate-limit/sqlite-limit-store.js';
import { parseJsonLines, startProcess, tsEntry } from '../../fixtures/processes.js';
import { startFakeGateway, writeEnrolledState } from '../control-fixtures.js';
import { ManualClock, T0, callContext } from './limit-fixtures.js';

const GARBAGE = Buffer.alloc(8192, 0x41);
const GARBAGE_WAL = Buffer.alloc(4096, 0x57);

/** A logger whose lines the test reads. */
function capturingLogger(): { logger: pino.Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(JSON.parse(chunk.toString('utf8')) as Record<string, unknown>);
      done();
    },
  });
  return { logger: pino({ level: 'info' }, sink), lines };
}

function writeDamagedFile(dir: string): string {
  const file = path.join(dir, RATE_LIMIT_FILE);
  writeFileSync(file, GARBAGE, { mode: 0o600 });
  writeFileSync(`${file}-wal`, GARBAGE_WAL, { mode: 0o600 });
  return file;
}

const damagedCopies = (dir: string): string[] => readdirSync(dir).filter((f) => f.startsWith(`${RATE_LIMIT_FILE}.damaged-`)).sort();

t.test('a damaged rate-limits.sqlite is moved aside and made anew: limits hold across replicas, and the warning names both files', async (t) => {
  const dir = t.testdir();
  const file = writeDamagedFile(dir);
  const clock = new ManualClock();
  const { logger, lines } = capturingLogger();
  const a = await createNodeRateLimiter({ stateDir: dir, logger, env: { ZENOVA_NODE_REPLICAS: '2' }, clock });
  t.teardown(() => a.close());

  const aside = damagedCopies(dir);
  t.match(aside, [/^rate-limits\.sqlite\.damaged-\d{8}T\d{6}\.\d{3}Z$/], 'the damaged file was moved aside');
  t.same(readFileSync(path.join(dir, aside[0]!)), GARBAGE, 'and kept as it was');
  t.notOk(existsSync(`${file}-wal`) && readFileSync(`${file}-wal`).equals(GARBAGE_WAL), 'the -wal it left is not the new file\'s');
  const warning = lines.find((l) => l.level === 40 && l.file === file);
  t.ok(warning, 'a warning names the file');
  t.equal(warning?.movedTo, path.join(dir, aside[0]!), 'and where it went');
  t.match(String(warning?.msg), /damaged.*moved aside/);

  // A second replica opens the new file as it is: both count against one limit.
  const b = await createNodeRateLimiter({ stateDir: dir, logger, env: { ZENOVA_NODE_REPLICAS: '2' }, clock });
  t.teardown(() => b.close());
  t.equal(damagedCopies(dir).length, 1, 'the new file is not moved aside again');
  const keyLimits = { requestsPerMinute: 2 };
  t.equal(a.admit(callContext(clock, { keyLimits })), undefined);
  t.equal(b.admit(callContext(clock, { keyLimits })), undefined);
  t.equal(a.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_RATE_LIMITED', 'the limit holds');
  t.equal(b.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_RATE_LIMITED', 'on either replica');
  t.notOk(lines.some((l) => l.level === 50), 'nothing fell back to memory');
});

t.test('replicas starting at once on a damaged file move it aside once and share one new file', async (t) => {
  const dir = t.testdir();
  writeDamagedFile(dir);
  const worker = tsEntry('test/edge-node/rate-limit/replica-worker.ts');
  const runs = await Promise.all(
    [1, 2, 3].map((n) => startProcess({ name: `replica-${n}`, ...worker, args: [...worker.args, dir, String(T0), 'admit', '40', '60'], t })),
  );
  const admitted = await Promise.all(
    runs.map(async (run) => {
      const code = await run.exited;
      t.equal(code.code, 0, run.output());
      return Number(parseJsonLines(run.output()).find((line) => 'admitted' in line)?.admitted);
    }),
  );
  t.equal(admitted.reduce((sum, n) => sum + n, 0), 60, `one limit across them (admitted per replica: ${admitted.join(', ')})`);
  t.equal(damagedCopies(dir).filter((f) => !f.endsWith('-wal')).length, 1, 'one damaged copy');
});

t.test('a damaged lock file beside it is emptied and used: only its lock counts', async (t) => {
  const dir = t.testdir();
  const lockFile = rateLimitOpenLockFile(path.join(dir, RATE_LIMIT_FILE));
  writeFileSync(lockFile, GARBAGE, { mode: 0o600 });
  const { logger, lines } = capturingLogger();
  const limiter = await createNodeRateLimiter({ stateDir: dir, logger, env: { ZENOVA_NODE_REPLICAS: '2' }, clock: new ManualClock() });
  t.teardown(() => limiter.close());
  t.notOk(lines.some((l) => Number(l.level) >= 40), 'opened the file without a warning');
  t.equal(readFileSync(lockFile).length, 0);
});

t.test('a rate-limit file that cannot be opened at all leaves the replica counting in memory, with an error naming the file', async (t) => {
  const dir = t.testdir();
  const file = path.join(dir, RATE_LIMIT_FILE);
  // Not a file at all: SQLite cannot open it, nor can it be made anew in its place.
  mkdirSync(file);
  const clock = new ManualClock();
  const { logger, lines } = capturingLogger();
  const limiter = await createNodeRateLimiter({ stateDir: dir, logger, env: { ZENOVA_NODE_REPLICAS: '2' }, clock });
  t.teardown(() => limiter.close());
  const error = lines.find((l) => l.level === 50 && l.file === file);
  t.match(String(error?.msg), /keeps its rate-limit counters in memory/);
  const keyLimits = { requestsPerMinute: 1 };
  t.equal(limiter.admit(callContext(clock, { keyLimits })), undefined);
  t.equal(limiter.admit(callContext(clock, { keyLimits }))?.error.code, 'ZN_ERR_RATE_LIMITED', 'limits still hold in this process');
});

t.test('zenova-node serve with replicas starts on a damaged rate-limits.sqlite, logging what it did', async (t) => {
  const gateway = await startFakeGateway(t);
  const state = await writeEnrolledState(path.join(t.testdir(), 'state'), gateway);
  const file = writeDamagedFile(state.dir);
  const entry = tsEntry('edge-node/src/main.ts');
  const proc = await startProcess({
    name: 'zenova-node serve',
    command: entry.command,
    args: [...entry.args, 'serve', '--state-dir', state.dir, '--listen', '127.0.0.1:0'],
    env: { ZENOVA_NODE_REPLICAS: '2' },
    readyLine: /"msg":"node-edge listening"/,
    timeoutMs: 60_000,
    t,
  });
  const warning = parseJsonLines(proc.output()).find((l) => l.file === file);
  t.match(warning, { level: 40, movedTo: new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\.damaged-`) }, 'the move is logged naming the file');
  t.ok(existsSync(file), 'a new file is in its place');
  await proc.stop();
});
