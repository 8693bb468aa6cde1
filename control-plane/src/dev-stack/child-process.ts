/**
 * A child process of the dev stack: a TypeScript entry run with tsx, its output appended to a log
 * file, ready when it logs a JSON line with a given `msg`.
 *
 * Each child leads a process group of its own: a Ctrl-C in the terminal goes to the foreground
 * group only, i.e. to the dev stack, which then stops the children one at a time (main.ts). In the
 * terminal's group they got that SIGINT too, all at once, and then the dev stack's SIGTERM as a
 * second stop signal. A child stops by itself when the dev stack's process ends without stopping
 * it, however it ends (exit-with-dev-stack.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const exitWithDevStack = fileURLToPath(new URL('./exit-with-dev-stack.ts', import.meta.url));

export interface DevChild {
  name: string;
  child: ChildProcess;
  /** The ready line's parsed JSON. */
  ready: Record<string, unknown>;
  exited: Promise<number | null>;
  tail(): string;
  /** Resolves with the first JSON log line whose `msg` is `msg` (seen before or after the call). */
  waitForMsg(msg: string, timeoutMs: number): Promise<Record<string, unknown> | undefined>;
  stop(timeoutMs?: number): Promise<void>;
}

export async function startDevChild(opts: {
  name: string;
  entry: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  cwd: string;
  logFile: string;
  readyMsg: string;
  timeoutMs?: number;
}): Promise<DevChild> {
  const log = createWriteStream(opts.logFile, { flags: 'a', mode: 0o600 });
  const child = spawn(process.execPath, ['--import', 'tsx', '--import', exitWithDevStack, opts.entry, ...opts.args], {
    cwd: opts.cwd,
    env: opts.env,
    // stdin: the pipe whose end tells the child that the dev stack is gone.
    stdio: ['pipe', 'pipe', 'pipe'],
    detached: true,
  });
  child.stdin?.on('error', () => undefined);
  const lines: string[] = [];
  const seen = new Map<string, Record<string, unknown>>();
  const waiters: Array<{ msg: string; resolve: (v: Record<string, unknown>) => void }> = [];
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => { log.end(); resolve(code); }));
  const tail = (): string => lines.slice(-30).join('\n');
  const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new Error(`${opts.name} did not become ready within ${opts.timeoutMs ?? 60_000} ms:\n${tail()}`));
      // Not handed back, so nobody else would stop it.
      child.kill('SIGTERM');
    }, opts.timeoutMs ?? 60_000);
    const onLine = (line: string): void => {
      log.write(`${line}\n`);
      lines.push(line);
      if (lines.length > 200) lines.shift();
      try {
        const obj = JSON.parse(line) as Record<string, unknown>;
        if (typeof obj.msg === 'string' && !seen.has(obj.msg)) {
          seen.set(obj.msg, obj);
          for (const w of waiters.filter((x) => x.msg === obj.msg)) w.resolve(obj);
        }
        if (obj.msg === opts.readyMsg) {
          clearTimeout(timer);
          resolve(obj);
        }
      } catch {
        /* not a JSON log line */
      }
    };
    createInterface({ input: child.stdout }).on('line', onLine);
    createInterface({ input: child.stderr }).on('line', onLine);
    child.on('error', (err) => { clearTimeout(timer); reject(new Error(`cannot start ${opts.name}: ${err.message}`)); });
    void exited.then((code) => { clearTimeout(timer); reject(new Error(`${opts.name} exited during start-up (exit ${code}):\n${tail()}`)); });
  });
  return {
    name: opts.name,
    child,
    ready,
    exited,
    tail,
    waitForMsg(msg, timeoutMs) {
      const hit = seen.get(msg);
      if (hit) return Promise.resolve(hit);
      return new Promise((resolve) => {
        const timer = setTimeout(() => resolve(undefined), timeoutMs);
        waiters.push({ msg, resolve: (v) => { clearTimeout(timer); resolve(v); } });
      });
    },
    async stop(timeoutMs = 10_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      await exited;
      clearTimeout(timer);
    },
  };
}
