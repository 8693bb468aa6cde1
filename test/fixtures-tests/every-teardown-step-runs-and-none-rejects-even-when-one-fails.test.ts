// runEach (fixtures/teardown-steps.ts): tap 21 skips a test's remaining teardowns after one that
// rejects, so a multi-step teardown must run every step and never reject, logging what failed and
// making the test process exit 1.
import t from 'tap';
import { runEach } from '../fixtures/teardown-steps.js';

/** What `fn` writes to stderr while it runs. */
async function stderrOf(fn: () => Promise<void>): Promise<string> {
  const chunks: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: string | Uint8Array) => { chunks.push(String(chunk)); return true; });
  try {
    await fn();
  } finally {
    process.stderr.write = write;
  }
  return chunks.join('');
}

t.test('every step runs in order, a throwing and a rejecting one too, and runEach resolves', async (t) => {
  const ran: string[] = [];
  const stderr = await stderrOf(async () => {
    await t.resolves(runEach(
      'the three closers',
      () => { ran.push('first'); throw new Error('close failed'); },
      async () => { ran.push('second'); await Promise.resolve(); throw new Error('end rejected'); },
      async () => { await Promise.resolve(); ran.push('third'); },
    ), 'it never rejects');
  });
  t.same(ran, ['first', 'second', 'third'], 'each step ran, after the one before it finished');
  t.match(stderr, 'teardown step 1 of the three closers failed: close failed');
  t.match(stderr, 'teardown step 2 of the three closers failed: end rejected');
  t.notMatch(stderr, 'teardown step 3', 'a step that succeeded is not reported');
  t.equal(process.exitCode, 1, 'the test process will exit 1: the file still fails');
  process.exitCode = 0; // (this file's failures were on purpose)
});

t.test('steps that all succeed leave the exit code alone', async (t) => {
  await runEach('two fine closers', () => undefined, async () => { await Promise.resolve(); });
  t.not(process.exitCode, 1);
});

t.test("a test's earlier teardowns still run after one whose first step fails", async (t) => {
  const ran: string[] = [];
  const stderr = await stderrOf(async () => {
    await t.test('a test with two teardowns', async (tt) => {
      tt.teardown(() => { ran.push('earlier teardown'); });
      tt.teardown(() => runEach('the app', () => { throw new Error('app.close failed'); }, () => { ran.push('pool ended'); }));
      tt.pass('the body ran');
    });
  });
  t.same(ran, ['pool ended', 'earlier teardown'], 'the later step and the earlier teardown ran');
  t.match(stderr, 'teardown step 1 of the app failed: app.close failed');
  process.exitCode = 0; // (on purpose, as above)
});
