/**
 * A child process of the dev stack: a TypeScript entry run with tsx, its output appended to a log
 * file, ready when it logs a JSON line with a given `msg`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { createInterface } from 'node:readline';

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
  const child = spawn(process.execPath, ['--import', 'tsx', opts.entry, ...opts.args], {
    cwd: opts.cwd,
    env: opts.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const seen = new Map<string, Record<string, unknown>>();
  const waiters: Array<{ msg: string; resolve: (v: Record<string, unknown>) => void }> = [];
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => { log.end(); resolve(code); }));
  const tail = (): string => lines.slice(-30).join('\n');
  const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${opts.name} did not become ready within ${opts.timeoutMs ?? 60_000} ms:\n${tail()}`)), opts.timeoutMs ?? 60_000);
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
