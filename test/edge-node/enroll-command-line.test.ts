/**
 * `zenova-node enroll`'s command line: an empty --token and a --control-plane that is no usable URL
 * are usage errors (exit 2) with what is wrong, as the installer says them; and a failed enrollment
 * leaves no empty state dir of its own behind.
 */
import { existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { runInstall } from '../../installer/src/commands/install.js';
import { UsageError } from '../../installer/src/cli-context.js';
import { captureCli, hostEnv } from '../installer/fake-host.js';
import { runNodeCli as run } from './cli-capture.js';
import { startEnrollServer, tokenErrorAnswer } from './enroll-fixtures.js';
import { closedPort } from '../fixtures/loopback-server.js';

const TOKEN = 'zn_it_RW5yb2xsQ29tbWFuZExpbmVUZXN0VG9rZW4wMTIzNDU2Nzg5';

t.test('enroll --token \'\' (an unset shell variable) says the token is empty, as the installer does, exit 2', async (t) => {
  const dir = t.testdir({});
  const refused = await runInstall(['node', '--package', path.join(dir, 'p.zpkg'), '--control-plane', 'https://cp.example.test', '--token', ''], captureCli(dir).ctx, hostEnv(dir)).then(
    (exit) => new Error(`no usage error (exit ${exit})`),
    (err: unknown) => err as Error,
  );
  t.type(refused, UsageError);
  t.equal(refused.message, '--token is empty (an unset shell variable?): pass the token from the install command');
  for (const token of ['', '  ']) {
    const result = await run(['enroll', '--control-plane', 'https://127.0.0.1:9', '--token', token, '--state-dir', path.join(dir, 's')]);
    t.equal(result.code, 2, JSON.stringify(token));
    t.match(result.stderr, `zenova-node: ${refused.message}\n`, `${JSON.stringify(token)}: the installer's words`);
    t.notMatch(result.stderr, /enroll needs --token/);
  }
  t.notOk(existsSync(path.join(dir, 's')), 'no state dir created');
});

t.test('enroll --token with whitespace inside is refused as the installer refuses it, exit 2, nothing sent', async (t) => {
  const dir = t.testdir({});
  const result = await run(['enroll', '--control-plane', 'https://127.0.0.1:9', '--token', 'a b', '--state-dir', path.join(dir, 's')]);
  t.equal(result.code, 2);
  t.equal(result.stderr, 'zenova-node: --token contains whitespace; tokens never do: copy it again from the install command\n');
});

t.test('a --control-plane URL with a port out of range, or no URL at all, is a usage error saying so, exit 2', async (t) => {
  const dir = t.testdir({});
  const cases: Array<[string, RegExp]> = [
    ['https://127.0.0.1:99999', /^zenova-node: --control-plane has port 99999, out of range: a port is 1 to 65535\n/],
    ['https://[::1]:70000/', /^zenova-node: --control-plane has port 70000, out of range/],
    ['https://cp.example.test:0', /^zenova-node: --control-plane has port 0, out of range/],
    ['https://exa mple.test', /^zenova-node: --control-plane is not a URL \(not shown: it does not look like a URL\); pass the control plane's https:\/\/ URL, as in the install command\n/],
    ['https://user:pw@cp.example.test', /^zenova-node: --control-plane must not carry credentials, a query or a fragment\n/],
  ];
  for (const [url, expected] of cases) {
    const result = await run(['enroll', '--control-plane', url, '--token', TOKEN, '--state-dir', path.join(dir, 's')]);
    t.equal(result.code, 2, url);
    t.match(result.stderr, expected, url);
    t.match(result.stderr, /Usage: zenova-node enroll/, `${url}: with the usage`);
    t.notMatch(result.stderr, /zenova-node: enrollment failed/, url);
  }
  t.notOk(existsSync(path.join(dir, 's')), 'no state dir created');
});

t.test('a failed enrollment removes the state dir it created while that is still empty, and nothing else', async (t) => {
  const dir = t.testdir({});
  const port = await closedPort();
  const url = `https://127.0.0.1:${port}`;

  const created = path.join(dir, 'new-state');
  const refused = await run(['enroll', '--control-plane', url, '--token', TOKEN, '--state-dir', created]);
  t.equal(refused.code, 1, refused.stderr);
  t.match(refused.stderr, /enrollment failed: .*refused the connection/);
  t.notOk(existsSync(created), 'the empty dir this run created is gone');
  const nested = path.join(dir, 'made/by/this-run/state');
  t.equal((await run(['enroll', '--control-plane', url, '--token', TOKEN, '--state-dir', nested])).code, 1);
  t.notOk(existsSync(path.join(dir, 'made')), 'so are the parents it made for it');
  t.ok(existsSync(dir), 'not the dir that was there');

  const existing = path.join(dir, 'existing-state');
  mkdirSync(existing, { mode: 0o700 });
  t.equal((await run(['enroll', '--control-plane', url, '--token', TOKEN, '--state-dir', existing])).code, 1);
  t.ok(statSync(existing).isDirectory(), 'a dir that was there before is kept, empty or not');

  const holding = path.join(dir, 'holding-state');
  mkdirSync(holding, { mode: 0o700 });
  writeFileSync(path.join(holding, 'keep-me'), 'x');
  t.equal((await run(['enroll', '--control-plane', url, '--token', TOKEN, '--state-dir', holding])).code, 1);
  t.same(readdirSync(holding), ['keep-me']);

  // A 503 after the redemption key was saved: the dir holds the key for a rerun, so it stays. A
  // refusal of the token itself ends the attempt and removes the key: that dir is empty again.
  let answer = tokenErrorAnswer(503, 'ZN_ERR_CP_UNAVAILABLE', 'try again');
  const server = await startEnrollServer(t, { enroll: () => answer });
  const ca = path.join(dir, 'ca.pem');
  writeFileSync(ca, server.ca.certPem);
  const attempted = path.join(dir, 'attempted-state');
  const unavailable = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', attempted, '--ca-file', ca]);
  t.equal(unavailable.code, 1, unavailable.stderr);
  t.same(readdirSync(attempted), ['enroll-attempt.json'], 'a dir this run wrote into is kept');

  answer = tokenErrorAnswer(401, 'ZN_ERR_CP_TOKEN_UNKNOWN', 'unknown token');
  const spent = path.join(dir, 'spent-state');
  const tokenRefused = await run(['enroll', '--control-plane', server.url, '--token', TOKEN, '--state-dir', spent, '--ca-file', ca]);
  t.equal(tokenRefused.code, 1, tokenRefused.stderr);
  t.notOk(existsSync(spent), 'a dir emptied again by the refusal is gone');
});

t.test('a failed enrollment with a placeholder token (--token a) says what failed in plain words, not with every "a" redacted', async (t) => {
  const dir = t.testdir({});
  const port = await closedPort();
  const result = await run(['enroll', '--control-plane', `https://127.0.0.1:${port}`, '--token', 'a', '--state-dir', path.join(dir, 's')]);
  t.equal(result.code, 1);
  t.match(result.stderr, /^zenova-node: enrollment failed: /);
  t.notMatch(result.stderr, /\[redacted\]/, 'a one-letter "token" is no secret to hide');
  t.match(result.stderr, /refused the connection/);
});
