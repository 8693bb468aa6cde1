// The serving daemon's stdout logger gathers lines and writes them together; none is lost on exit,
// warnings go out at once, and a quiet daemon still writes within the flush interval. Each case
// runs a real child process; "MARK" is written past the logger, so its place among the lines on
// stdout shows whether a line was held back.
import { spawn } from 'node:child_process';
import t from 'tap';
import type { Test } from 'tap';
import { tsEntry } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';

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
