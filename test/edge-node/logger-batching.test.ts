// The serving daemon's stdout logger gathers lines and writes them together; none is lost on exit,
// warnings go out at once, and a quiet daemon still writes within the flush interval. Each case
// runs a real child process; "MARK" is written past the logger, so its place among the lines on
// stdout shows whether a line was held back.
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { tsEntry } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';
import { BatchedLogWriter } from '../../edge-node/src/batched-log-writer.js';

function runChild(t: Test, scenario: string): { lines: () => string[]; exited: () => boolean } {
  const { command, args } = tsEntry('test/fixtures/batched-logger-child.ts');
  const child = spawn(command, [...args, scenario], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  let exited = false;
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
  child.on('exit', () => (exited = true));
  t.teardown(() => {
    if (!exited) child.kill('SIGKILL');
  });
  const lines = (): string[] =>
    out
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => (l === 'MARK' ? l : String((JSON.parse(l) as { msg: string }).msg)));
  return { lines, exited: () => exited };
}

t.test('an info line is held back, and written when the process exits', async (t) => {
  const child = runChild(t, 'exit');
  await waitFor(() => child.exited() && child.lines().length === 2, { what: 'the child to exit with both lines out' });
  t.same(child.lines(), ['MARK', 'one']);
});

t.test('a warning is written at once, with the lines logged before it', async (t) => {
  const child = runChild(t, 'warn');
  await waitFor(() => child.exited() && child.lines().length === 3, { what: 'the child to exit with all lines out' });
  t.same(child.lines(), ['one', 'two', 'MARK']);
});

t.test('a quiet daemon writes a held-back line within the flush interval, without exiting', async (t) => {
  const child = runChild(t, 'idle');
  await waitFor(() => child.lines().length === 2, { what: 'the periodic flush' });
  t.same(child.lines(), ['MARK', 'one']);
  t.equal(child.exited(), false, 'written by the timer, not by exit');
});

// The batched writer itself, on real file descriptors.
t.test('batched lines come out whole and in order across many batches, multi-byte characters included', async (t) => {
  const { fd, file } = tempFd(t);
  const writer = new BatchedLogWriter(fd, 1000, 60_000);
  const expected: string[] = [];
  for (let i = 0; i < 2000; i++) {
    const line = `{"n":${i},"text":"${'ü中a'.repeat(i % 97)}"}\n`;
    expected.push(line);
    writer.write(line);
  }
  writer.flush();
  t.equal(readFileSync(file, 'utf8'), expected.join(''));
  t.equal(writer.dropped, 0);
});

t.test('lines wait until a batch is full, then go out together', async (t) => {
  const { fd, file } = tempFd(t);
  const writer = new BatchedLogWriter(fd, 100, 60_000);
  writer.write(`${'a'.repeat(59)}\n`);
  t.equal(statSync(file).size, 0, 'one line of 60 characters waits');
  writer.write(`${'b'.repeat(59)}\n`);
  t.equal(statSync(file).size, 120, 'the second line fills the batch: both are written');
});

t.test('a held-back line is written by the timer when no more lines come', async (t) => {
  const { fd, file } = tempFd(t);
  const writer = new BatchedLogWriter(fd, 8192, 50);
  writer.write('quiet\n');
  t.equal(statSync(file).size, 0);
  await waitFor(() => statSync(file).size === 6, { what: 'the timer to write the line' });
  t.equal(readFileSync(file, 'utf8'), 'quiet\n');
});

t.test('a stdout that is gone drops its batch and the writer keeps going', async (t) => {
  // A descriptor number no process here has open (closing a real one could let it be reused).
  const writer = new BatchedLogWriter(999_999, 10, 60_000);
  t.doesNotThrow(() => writer.write('lost line one\n'));
  writer.write('x\n');
  writer.flush();
  t.equal(writer.dropped, 2, 'both lines counted as dropped, none thrown');
});

function tempFd(t: Test): { fd: number; file: string } {
  const dir = mkdtempSync(join(tmpdir(), 'zn-log-writer-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'stdout.log');
  const fd = openSync(file, 'w');
  t.teardown(() => {
    try {
      closeSync(fd);
    } catch {
      // closed by the test
    }
  });
  return { fd, file };
}
