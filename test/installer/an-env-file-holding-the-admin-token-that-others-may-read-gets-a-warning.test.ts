/**
 * `zenova gateway-node list --env-file adm.env` with adm.env holding ZENOVA_ADMIN_TOKEN and readable
 * by group or others (chmod 644) warns on standard error, naming the file and `chmod 600`, never
 * the token, as a token file others may read is warned about; docs/install.md has the env file
 * readable by root only. A private file (0600), or one without the token, gets no warning.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { readEnvFile } from '../../installer/src/connection/env-file.js';
import { startProcess, tsEntry } from '../fixtures/processes.js';

const TOKEN = 'test-admin-token-EnvFileWarningNeverShowsIt0123';
const work = mkdtempSync(join(tmpdir(), 'zn-env-mode-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

/** The test runner's own ZENOVA_* variables must not reach the CLI. */
const NO_ZENOVA_ENV: NodeJS.ProcessEnv = Object.fromEntries(Object.keys(process.env).filter((k) => k.startsWith('ZENOVA_')).map((k) => [k, undefined]));

function envFile(name: string, mode: number, text = `ZENOVA_CONTROL_PLANE_URL=http://127.0.0.1:1\nZENOVA_ADMIN_TOKEN=${TOKEN}\n`): string {
  const file = join(work, name);
  writeFileSync(file, text);
  chmodSync(file, mode);
  return file;
}

/** `zenova gateway-node list --env-file FILE` as its own process (a closed port: exit 1, nothing sent). */
async function list(t: { teardown(fn: () => unknown): void }, file: string): Promise<{ code: number | null; output: string }> {
  const entry = tsEntry('installer/src/cli.ts');
  // `--` before the script, as the packaged launcher has it: else Node takes `--env-file F` as its own.
  const args = [...entry.args.slice(0, -1), '--', ...entry.args.slice(-1), 'gateway-node', 'list', '--env-file', file];
  const proc = await startProcess({ name: 'zenova', command: entry.command, args, env: NO_ZENOVA_ENV, cwd: work, t });
  const { code } = await proc.exited;
  return { code, output: proc.output() };
}

t.test('an env file holding the admin token that group or others may read gets a warning naming it and chmod 600, never the token', async (t) => {
  const file = envFile('adm.env', 0o644);
  const result = await list(t, file);
  t.equal(result.code, 1, 'still runs: exit 1 for the closed port');
  t.match(result.output, `zenova: warning: the env file ${file} holds ZENOVA_ADMIN_TOKEN and is readable by group or others (mode 0644); keep it private (chmod 600 ${file})`);
  t.match(result.output, /cannot reach the control plane at http:\/\/127\.0\.0\.1:1/, 'then goes on');
  t.notMatch(result.output, TOKEN, 'never the token');
});

t.test('a private env file (0600) gets no warning', async (t) => {
  const result = await list(t, envFile('private.env', 0o600));
  t.equal(result.code, 1);
  t.notMatch(result.output, /warning/);
});

t.test('which files are warned about: the token in a file group or others may read or write', async (t) => {
  const warned = (file: string): string[] => {
    const lines: string[] = [];
    readEnvFile(file, '--env-file', (line) => lines.push(line));
    return lines;
  };
  t.same(warned(envFile('grp.env', 0o640)).length, 1, 'readable by the group');
  t.match(warned(envFile('grp-write.env', 0o620))[0], /is writable by group or others \(mode 0620\); keep it private \(chmod 600 /, 'writable by the group');
  t.same(warned(envFile('own.env', 0o400)), [], 'readable by its owner only');
  t.same(warned(envFile('url-only.env', 0o644, 'ZENOVA_CONTROL_PLANE_URL=https://cp.example.test\n')), [], 'no token, nothing secret');
  t.same(warned(envFile('empty-token.env', 0o644, 'ZENOVA_ADMIN_TOKEN=\n')), [], 'an empty token is no secret');
});
