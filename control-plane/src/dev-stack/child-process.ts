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
    async stop(timeoutMs = 10_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      await exited;
      clearTimeout(timer);
    },
  };
}
