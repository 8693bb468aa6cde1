/**
 * An admin token an HTTP header cannot carry (a letter outside Latin-1, curly quotes pasted from a
 * document, a space) is a usage error naming ZENOVA_ADMIN_TOKEN and where it came from, before
 * anything is sent, never quoting the value; it was reported as "cannot reach the control plane
 * … UND_ERR_INVALID_ARG". The URL points at a closed port: nothing answers, and nothing needs to.
 */
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from '../../installer/src/cli.js';
import { captureCli } from './fake-host.js';

const cwd = mkdtempSync(join(tmpdir(), 'zn-admin-token-'));
t.teardown(() => rmSync(cwd, { recursive: true, force: true }));
const URL = 'http://127.0.0.1:1';

async function list(env: Record<string, string>, argv: string[] = []): Promise<{ code: number; out: string; err: string }> {
  const cli = captureCli(cwd);
  const code = await runCli(['gateway-node', 'list', ...argv], { ...cli.ctx, env });
  return { code, out: cli.out(), err: cli.err() };
}

const BAD_TOKENS: Array<[string, string]> = [
  ['CJK letters', '秘密token-0123456789abcdef'],
  ['curly quotes pasted around it', '“token-0123456789abcdef”'],
  ['a space inside', 'token-0123 456789abcdef'],
  ['a tab inside', 'token-0123\t456789abcdef'],
  ['a Latin-1 letter', 'tökén-0123456789abcdef'],
];

t.test('a token from the environment with a character a header cannot carry is a usage error naming ZENOVA_ADMIN_TOKEN, not its value', async (t) => {
  for (const [what, token] of BAD_TOKENS) {
    const result = await list({ ZENOVA_CONTROL_PLANE_URL: URL, ZENOVA_ADMIN_TOKEN: token });
    t.equal(result.code, 2, `${what}: exit 2`);
    t.match(result.err, /^zenova: ZENOVA_ADMIN_TOKEN \(from the environment\) holds a character an admin token never has \(a space, a control character, or one outside ASCII such as a curly quote\)/, `${what}: the message`);
    t.notMatch(result.err, /cannot reach|UND_ERR/, `${what}: not reported as a connection failure`);
    for (const part of token.split(/[\s“”]+/).filter((p) => p.length > 3)) t.notOk(result.err.includes(part) || result.out.includes(part), `${what}: the value is never printed`);
  }
});

t.test('a token in an env file wrapped in curly quotes names the env file as its source', async (t) => {
  const envFile = join(cwd, 'admin.env');
  writeFileSync(envFile, `ZENOVA_CONTROL_PLANE_URL=${URL}\nZENOVA_ADMIN_TOKEN=“secret-token-0123456789”\n`, { mode: 0o600 });
  const result = await list({}, ['--env-file', envFile]);
  t.equal(result.code, 2);
  t.match(result.err, new RegExp(`^zenova: ZENOVA_ADMIN_TOKEN \\(from env file ${envFile.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}\\) holds a character an admin token never has`));
  t.notOk(result.err.includes('secret-token'), 'the value is never printed');
});

t.test('a token of visible ASCII passes the check and goes on to the connection', async (t) => {
  const result = await list({ ZENOVA_CONTROL_PLANE_URL: URL, ZENOVA_ADMIN_TOKEN: 'tok_EN-0123.456~789+/=!#$%&*' });
  t.equal(result.code, 1, 'exit 1: the closed port, not a usage error');
  t.match(result.err, /cannot reach|connection/);
  t.notMatch(result.err, /ZENOVA_ADMIN_TOKEN/);
});
