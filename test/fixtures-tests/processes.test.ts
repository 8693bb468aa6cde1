import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';

const node = process.execPath;

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

t.test('startProcess captures stdout and stderr line by line and resolves on its ready line', async (t) => {
  const script = `
    console.log(JSON.stringify({ level: 30, msg: 'booting' }));
    console.error('warming up on stderr');
    process.stdout.write('listening on 127.0.0.1:1234\\n');
    process.stdin.resume();
    process.on('SIGTERM', () => { console.log('bye'); process.exit(7); });
    setInterval(() => {}, 1000);
  `;
  const child = await startProcess({ name: 'talker', command: node, args: ['-e', script], readyLine: /listening on/, t });
  // Lines seen before the call count too.
  t.equal(await child.waitForLine((line) => line.includes('warming up')), 'warming up on stderr');
  t.match(child.output(), /booting/);
  t.match(child.output(), /warming up on stderr/);
  t.same(parseJsonLines(child.output()), [{ level: 30, msg: 'booting' }]);
  t.equal(await child.stop(), 7, 'stop() resolves with the exit code after SIGTERM');
  t.match(child.output(), /bye/, 'output written while stopping is captured');
  t.same(await child.exited, { code: 7, signal: null });
});

t.test('startProcess rejects with the exit code and output when the child dies before its ready line', async (t) => {
  const script = `console.error('fatal: config missing'); process.exit(3);`;
  await t.rejects(
    startProcess({ name: 'crasher', command: node, args: ['-e', script], readyLine: /ready/, t }),
    { message: /crasher exited \(code 3.*\n.*fatal: config missing/s },
  );
});

t.test('waitForLine times out with the output tail when the line never comes', async (t) => {
  const child = await startProcess({ name: 'quiet', command: node, args: ['-e', `console.log('only this'); setInterval(() => {}, 1000);`], readyLine: /only this/, t });
  await t.rejects(child.waitForLine(/never/, 100), { message: /timed out after 100ms.*quiet.*\n.*only this/s });
});

t.test('kill9 kills the child and stop() after exit just reports the outcome', async (t) => {
  const child = await startProcess({ name: 'victim', command: node, args: ['-e', `console.log('up'); setInterval(() => {}, 1000);`], readyLine: /up/, t });
  await child.kill9();
  t.same(await child.exited, { code: null, signal: 'SIGKILL' });
  t.equal(await child.stop(), null);
});

t.test('teardown kills a child that ignores SIGTERM', async (t) => {
  let pid = 0;
  await t.test('a test that leaves a stubborn child running', async (tt) => {
    const script = `process.on('SIGTERM', () => console.log('ignoring SIGTERM')); console.log('up'); setInterval(() => {}, 1000);`;
    const child = await startProcess({ name: 'stubborn', command: node, args: ['-e', script], readyLine: /up/, t: tt });
    pid = child.child.pid!;
    tt.ok(isRunning(pid));
  });
  await waitFor(() => !isRunning(pid), { what: 'the stubborn child to be gone after teardown', timeoutMs: 20_000 });
  t.notOk(isRunning(pid));
});

t.test('tsEntry runs a TypeScript file through tsx from any working directory', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zenova-ts-entry-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'entry.ts');
  writeFileSync(file, `const answer: number = 6 * 7;\nconsole.log('answer=' + answer);\n`);
  const entry = tsEntry(file);
  t.equal(entry.command, process.execPath);
  t.equal(entry.args[0], '--import');
  t.equal(entry.args.at(-1), file);
  const child = await startProcess({ name: 'ts-entry', ...entry, cwd: dir, t });
  t.same(await child.exited, { code: 0, signal: null });
  t.match(child.output(), /answer=42/);
});

t.test('tsEntry resolves a relative file from the repository root', async (t) => {
  const entry = tsEntry('test/fixtures/processes.ts');
  t.ok(path.isAbsolute(entry.args.at(-1)!));
  t.match(entry.args.at(-1)!, /\/test\/fixtures\/processes\.ts$/);
});

t.test('parseJsonLines keeps JSON objects and skips other lines', async (t) => {
  t.same(parseJsonLines('plain\n{"a":1}\n[1,2]\n{broken\n  {"b":"x"}  \n'), [{ a: 1 }, { b: 'x' }]);
});

t.test('children get the test environment plus overrides, without the TAP settings', async (t) => {
  process.env.ZENOVA_FIXTURE_INHERITED = 'yes';
  process.env.ZENOVA_FIXTURE_REMOVED = 'present';
  t.teardown(() => {
    delete process.env.ZENOVA_FIXTURE_INHERITED;
    delete process.env.ZENOVA_FIXTURE_REMOVED;
  });
  const script = `console.log(JSON.stringify({ inherited: process.env.ZENOVA_FIXTURE_INHERITED, removed: process.env.ZENOVA_FIXTURE_REMOVED ?? null, extra: process.env.ZENOVA_FIXTURE_EXTRA, tap: Object.keys(process.env).filter((k) => k === 'TAP' || k.startsWith('TAP_')) }))`;
  const child = await startProcess({ name: 'env', command: node, args: ['-e', script], env: { ZENOVA_FIXTURE_EXTRA: 'x', ZENOVA_FIXTURE_REMOVED: undefined }, t });
  await child.exited;
  const [report] = parseJsonLines(child.output());
  t.match(report, { inherited: 'yes', removed: null, extra: 'x', tap: [] });
});
