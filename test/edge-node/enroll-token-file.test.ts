/**
 * `zenova-node enroll --token-file` reads the file as `zenova install node --token-file` does: the
 * token is its one non-blank line, a file with none or several is refused with the installer's
 * message (exit 2, nothing sent), and a file group or others have any access to draws the warning.
 * `--token-file -` reads the token from standard input, by the same rules, in both.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmod, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import type { Test } from 'tap';
import { runInstall } from '../../installer/src/commands/install.js';
import { UsageError } from '../../installer/src/cli-context.js';
import { captureCli, hostEnv } from '../installer/fake-host.js';
import { runNodeCli as run } from './cli-capture.js';
import { startEnrollServer } from './enroll-fixtures.js';

const TOKEN = 'zn_it_VG9rZW5GaWxlQmxhbmtMaW5lc0Fyb3VuZEl0MDEyMzQ1Njc4OQ';

/** The installer's refusal of the same --token-file, as its usage error says it. */
async function installerRefusal(dir: string, file: string): Promise<string> {
  const argv = ['node', '--package', path.join(dir, 'zenova-node.zpkg'), '--control-plane', 'https://cp.example.test', '--token-file', file];
  const refused = await runInstall(argv, captureCli(dir).ctx, hostEnv(dir)).then(
    (exit) => new Error(`no usage error (exit ${exit})`),
    (err: unknown) => err as Error,
  );
  if (!(refused instanceof UsageError)) throw refused;
  return refused.message;
}

t.test('a token file whose first line is blank enrolls with the token on its one non-blank line', async (t) => {
  const server = await startEnrollServer(t);
  const dir = t.testdir({});
  const tokenFile = path.join(dir, 'token');
  await writeFile(tokenFile, `\n  \r\n${TOKEN}  \n\n`, { mode: 0o600 });
  const ca = path.join(dir, 'ca.pem');
  await writeFile(ca, server.ca.certPem);
  const result = await run(['enroll', '--control-plane', server.url, '--token-file', tokenFile, '--state-dir', path.join(dir, 'state'), '--ca-file', ca]);
  t.equal(result.code, 0, result.stderr);
  t.equal((server.requests[1]?.body as { token?: string }).token, TOKEN);
  t.notMatch(result.stderr, /warning/);
});

/** Each token file is refused by enroll (exit 2) in the installer's words, and the token never printed. */
async function refusedAsTheInstallerRefusesThem(t: Test, dir: string, files: Array<[string, string, RegExp]>): Promise<void> {
  for (const [name, text, expected] of files) {
    const file = path.join(dir, name);
    await writeFile(file, text, { mode: 0o600 });
    // Port 9 (discard) is never asked: a refused file or token ends the command before any connection.
    const result = await run(['enroll', '--control-plane', 'https://127.0.0.1:9', '--token-file', file, '--state-dir', path.join(dir, 's')]);
    t.equal(result.code, 2, name);
    const installer = await installerRefusal(dir, file);
    t.match(installer, expected, `${name}: the installer's message`);
    t.equal(result.stderr, `zenova-node: ${installer}\n`, `${name}: the same message from zenova-node`);
    t.notOk(result.stderr.includes(TOKEN), `${name}: the token is not printed`);
  }
}

t.test('a token file with no token or with several non-blank lines is refused with the installer\'s message, exit 2, nothing sent', async (t) => {
  const dir = t.testdir({});
  const files: Array<[string, string, RegExp]> = [
    ['empty', '', /is empty: write the token from the install command into it/],
    ['blank-lines', '\n \n\t\n', /is empty: write the token from the install command into it/],
    ['two-lines', `${TOKEN}\nzn_it_SECONDLINE2\n`, /has 2 non-blank lines; a token file holds one token/],
  ];
  await refusedAsTheInstallerRefusesThem(t, dir, files);
});

t.test('a token file group or others have any access to draws the warning the installer gives; an owner-only one none', async (t) => {
  const server = await startEnrollServer(t);
  const dir = t.testdir({});
  const ca = path.join(dir, 'ca.pem');
  await writeFile(ca, server.ca.certPem);
  const tokenFile = path.join(dir, 'token');
  await writeFile(tokenFile, `${TOKEN}\n`);
  for (const [mode, warns] of [[0o620, true], [0o640, true], [0o604, true], [0o600, false], [0o400, false]] as const) {
    await chmod(tokenFile, mode);
    const result = await run(['enroll', '--control-plane', server.url, '--token-file', tokenFile, '--state-dir', path.join(dir, `s-${mode.toString(8)}`), '--ca-file', ca]);
    t.equal(result.code, 0, result.stderr);
    if (warns) {
      t.match(result.stderr, `zenova-node: warning: the token file ${tokenFile} is readable by group or others (mode 0${mode.toString(8)}); keep it private (chmod 600 ${tokenFile})\n`, `mode 0${mode.toString(8)} warns`);
    } else {
      t.notMatch(result.stderr, /warning/, `mode 0${mode.toString(8)} does not warn`);
    }
  }
});

t.test('a token file whose token holds whitespace or is too long is refused with the installer\'s message, exit 2, nothing sent', async (t) => {
  const dir = t.testdir({});
  const files: Array<[string, string, RegExp]> = [
    ['inner-space', 'a b\n', /contains whitespace; tokens never do: copy it again from the install command/],
    ['inner-tab', `${TOKEN}\tx\n`, /contains whitespace; tokens never do/],
    ['too-long', `${'x'.repeat(513)}\n`, /is longer than 512 characters: copy it again from the install command/],
  ];
  await refusedAsTheInstallerRefusesThem(t, dir, files);
});

/** A CLI (`edge-node/src/main.ts` or `installer/src/cli.ts`) run as a child process with `stdin` piped to it. */
async function childWithStdin(entry: string, argv: string[], stdin: string): Promise<{ code: number | null; stdout: string; stderr: string; args: string[] }> {
  const script = fileURLToPath(new URL(`../../${entry}`, import.meta.url));
  const args = ['--import', 'tsx', script, ...argv];
  const child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  child.stdin.end(stdin);
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stdout, stderr, args };
}

t.test('zenova-node enroll --token-file - reads the token from standard input: a real process enrolls with it, the token in none of its arguments', async (t) => {
  const server = await startEnrollServer(t);
  const dir = t.testdir({});
  const ca = path.join(dir, 'ca.pem');
  await writeFile(ca, server.ca.certPem);
  const result = await childWithStdin('edge-node/src/main.ts', ['enroll', '--control-plane', server.url, '--token-file', '-', '--state-dir', path.join(dir, 'state'), '--ca-file', ca], `\n${TOKEN}\n`);
  t.equal(result.code, 0, result.stderr);
  t.equal((server.requests[1]?.body as { token?: string }).token, TOKEN);
  t.notOk(result.args.some((arg) => arg.includes(TOKEN)), 'not in the process list');
});

t.test('--token-file - with nothing on standard input is refused by zenova-node enroll and by the installer (real processes) in the same words, exit 2', async (t) => {
  const dir = t.testdir({});
  const enroll = await childWithStdin('edge-node/src/main.ts', ['enroll', '--control-plane', 'https://127.0.0.1:9', '--token-file', '-', '--state-dir', path.join(dir, 's')], '');
  t.equal(enroll.code, 2);
  t.equal(enroll.stderr, 'zenova-node: --token-file - (standard input) is empty: write the token from the install command into it\n');
  const install = await childWithStdin('installer/src/cli.ts', ['install', 'node', '--package', path.join(dir, 'zenova-node.zpkg'), '--control-plane', 'https://cp.example.test', '--token-file', '-'], '\n \n');
  t.equal(install.code, 2);
  t.match(install.stderr, /--token-file - \(standard input\) is empty: write the token from the install command into it/);
});
