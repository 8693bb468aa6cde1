/**
 * The dev stack's children (child-process.ts) run in process groups of their own, so a Ctrl-C in
 * the terminal reaches only the dev stack, which stops them in order; and since no terminal signal
 * reaches them any more, one whose dev stack dies without stopping it (SIGKILL) stops by itself.
 */
import t from 'tap';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { startDevChild } from '../../control-plane/src/dev-stack/child-process.js';
import { REPO_ROOT, startProcess, tsEntry } from '../fixtures/processes.js';
import { waitFor } from '../fixtures/wait-for.js';

const dir = mkdtempSync(join(tmpdir(), 'zn-devstack-child-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

/** A child that notes the signal it stopped on in `marker`. */
function childEntry(marker: string): string {
  const entry = join(dir, `child-${Math.random().toString(36).slice(2)}.mjs`);
  writeFileSync(
    entry,
    'import { writeFileSync } from "node:fs";\n' +
      `for (const s of ['SIGINT', 'SIGTERM']) process.on(s, () => { writeFileSync(${JSON.stringify(marker)}, s); process.exit(0); });\n` +
      'setInterval(() => undefined, 60_000);\n' +
      'console.log(JSON.stringify({ msg: "child ready" }));\n',
  );
  return entry;
}

function processGroupOf(pid: number): number {
  // /proc/PID/stat: "pid (comm) state ppid pgrp …"; comm may hold spaces, so split after the ')'.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

t.test('a dev stack child leads a process group of its own, out of the reach of a terminal Ctrl-C', async (t) => {
  const marker = join(dir, 'group.signal');
  const child = await startDevChild({ name: 'child', entry: childEntry(marker), args: [], env: process.env, cwd: REPO_ROOT, logFile: join(dir, 'group.log'), readyMsg: 'child ready', timeoutMs: 20_000 });
  t.teardown(() => child.stop());
  const pid = child.child.pid!;
  t.equal(processGroupOf(pid), pid, 'the child is its own group leader');
  t.not(processGroupOf(pid), processGroupOf(process.pid), 'not in the group of the process that started it');
  await child.stop();
  t.equal(readFileSync(marker, 'utf8'), 'SIGTERM', 'it stops on the SIGTERM the dev stack sends');
});

t.test('a child stops by itself, as on SIGTERM, when its dev stack is killed with SIGKILL', async (t) => {
  const marker = join(dir, 'orphan.signal');
  const devStack = join(dir, 'fake-dev-stack.mts');
  writeFileSync(
    devStack,
    `import { startDevChild } from ${JSON.stringify(pathToFileURL(join(REPO_ROOT, 'control-plane/src/dev-stack/child-process.ts')).href)};\n` +
      `const child = await startDevChild({ name: 'child', entry: ${JSON.stringify(childEntry(marker))}, args: [], env: process.env, cwd: ${JSON.stringify(REPO_ROOT)}, logFile: ${JSON.stringify(join(dir, 'orphan.log'))}, readyMsg: 'child ready', timeoutMs: 20_000 });\n` +
      'console.log(JSON.stringify({ msg: "fake dev stack ready", childPid: child.child.pid }));\n',
  );
  const { command, args } = tsEntry(devStack);
  const proc = await startProcess({ name: 'fake-dev-stack', command, args, readyLine: /fake dev stack ready/, timeoutMs: 30_000, t });
  const { childPid } = JSON.parse(await proc.waitForLine(/fake dev stack ready/)) as { childPid: number };
  t.teardown(() => { if (alive(childPid)) process.kill(childPid, 'SIGKILL'); });
  t.ok(alive(childPid), 'the child runs');

  await proc.kill9();
  await waitFor(() => !alive(childPid), { what: `the child (pid ${childPid}) to stop after its dev stack died`, timeoutMs: 15_000 });
  t.notOk(alive(childPid), 'the child did not outlive its dev stack');
  t.ok(existsSync(marker), 'it stopped through its own shutdown');
  t.equal(readFileSync(marker, 'utf8'), 'SIGTERM', 'as on SIGTERM');
});
