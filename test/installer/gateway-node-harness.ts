// Shared set-up for the `zenova gateway-node` tests: a real control-plane process on a real
// PostgreSQL (HTTP, or HTTPS with a throwaway CA), and the CLI run in-process or as its own process.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runCli } from '../../installer/src/cli.js';
import { testDatabase } from '../fixtures/postgres.js';
import { parseJsonLines, startProcess, tsEntry } from '../fixtures/processes.js';
import type { StartedProcess } from '../fixtures/processes.js';

export type Tap = { teardown(fn: () => unknown): void };

export const ADMIN_TOKEN = `test-admin-${randomBytes(24).toString('hex')}`;

/** The test runner's own ZENOVA_* variables must not reach a child or the CLI. */
export const CLEAN_ENV: NodeJS.ProcessEnv = Object.fromEntries(
  Object.keys(process.env).filter((k) => k.startsWith('ZENOVA_')).map((k) => [k, undefined]),
);

/** A temp directory removed at teardown. */
export function tempDir(t: Tap, prefix = 'zenova-cli-'): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export interface ControlPlane {
  url: string;
  process: StartedProcess;
}

/** A control plane on 127.0.0.1:0; with `tls` it serves HTTPS with that certificate. */
export async function startControlPlane(t: Tap, opts: { tls?: { certPem: string; keyPem: string } } = {}): Promise<ControlPlane> {
  const db = await testDatabase(t);
  const dir = tempDir(t, 'zenova-cp-');
  const env: NodeJS.ProcessEnv = {
    ...CLEAN_ENV,
    ZENOVA_DATABASE_URL: db.url,
    ZENOVA_LISTEN: '127.0.0.1:0',
    ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN,
    ZENOVA_SECRET_ENC_KEY: randomBytes(32).toString('base64'),
    ZENOVA_GATEWAY_LISTEN: '127.0.0.1:0',
    ZENOVA_GATEWAY_TLS_DIR: path.join(dir, 'gateway-tls'),
  };
  if (opts.tls) {
    const certFile = path.join(dir, 'console.crt');
    const keyFile = path.join(dir, 'console.key');
    writeFileSync(certFile, opts.tls.certPem);
    writeFileSync(keyFile, opts.tls.keyPem, { mode: 0o600 });
    env.ZENOVA_TLS_CERT_FILE = certFile;
    env.ZENOVA_TLS_KEY_FILE = keyFile;
  }
  const entry = tsEntry('control-plane/src/main.ts');
  const proc = await startProcess({
    name: 'zenova-control', command: entry.command, args: entry.args, env, readyLine: /control plane listening/, timeoutMs: 60_000, t,
  });
  const ready = parseJsonLines(proc.output()).find((line) => line.msg === 'control plane listening');
  if (typeof ready?.url !== 'string') throw new Error(`no url in the ready line:\n${proc.output()}`);
  return { url: ready.url, process: proc };
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `zenova …` in this process, with exactly `env` as its environment. */
export async function zenova(argv: string[], opts: { env: Record<string, string | undefined>; cwd: string; now?: Date }): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(argv, {
    stdout: { write: (s: string) => { stdout += s; } },
    stderr: { write: (s: string) => { stderr += s; } },
    env: opts.env,
    cwd: opts.cwd,
    ...(opts.now ? { now: () => opts.now as Date } : {}),
  });
  return { code, stdout, stderr };
}

/** Runs `zenova …` as its own process (the npm script's entry point); stdout and stderr interleaved. */
export async function zenovaProcess(t: Tap, argv: string[], opts: { env: NodeJS.ProcessEnv; cwd: string }): Promise<{ code: number | null; output: string }> {
  const entry = tsEntry('installer/src/cli.ts');
  const proc = await startProcess({
    name: 'zenova', command: entry.command, args: [...entry.args, ...argv], env: { ...CLEAN_ENV, ...opts.env }, cwd: opts.cwd, t,
  });
  const { code } = await proc.exited;
  return { code, output: proc.output() };
}

/** The one-time command line printed by create / *-command (indented on a line of its own; the token piped in). */
export function printedCommand(stdout: string): string | undefined {
  return /^ {2}(printf '%s\\n' \S+ \| sudo \.\/zenova install node .*)$/m.exec(stdout)?.[1];
}
