/**
 * A value zenova-node's usage errors refuse is named back only when it is shaped like what the
 * option takes (an http(s) URL without its credentials, HOST:PORT, a number); anything else, such
 * as an enrollment token pasted in the wrong option's place, is never printed: the message says
 * where it was and what was expected. Exit code 2 as before. serve's settings from the environment
 * (an env file line) follow the same rule.
 */
import path from 'node:path';
import t from 'tap';
import { parseCli } from '../../edge-node/src/cli/args.js';
import { checkReplicasAgainstEnv } from '../../edge-node/src/cli/replica-supervisor.js';
import { ServeSettingError, readServeSettings } from '../../edge-node/src/cli/serve-settings.js';
import { parseControlPlaneUrl } from '../../edge-node/src/enroll/enroll.js';
import { EnrollError } from '../../edge-node/src/enroll/enroll-errors.js';
import { runNodeCli as run } from './cli-capture.js';

const TOKEN = 'zn_it_Tm90U2hvd25JblVzYWdlRXJyb3JzVGVzdFRva2VuMDEyMzQ1Njc4OQ';
/** A secret that is not token-shaped but would pass a looser check (no underscore, all letters and digits). */
const PASSWORD = 'S3cretPassw0rdValue';

function messageOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('no error thrown');
}

t.test('enroll --control-plane TOKEN (the token in the URL\'s place) is refused, exit 2, without printing the token', async (t) => {
  const dir = t.testdir({ f: `${TOKEN}\n` });
  const result = await run(['enroll', '--control-plane', TOKEN, '--token-file', path.join(dir, 'f'), '--state-dir', path.join(dir, 's')]);
  t.equal(result.code, 2);
  t.match(result.stderr, /^zenova-node: --control-plane must be an https:\/\/ URL .*\(not shown: it does not look like an http\(s\) URL\)\n/);
  t.notMatch(result.stderr, TOKEN.slice(0, 12), 'no part of the token');
});

t.test('a --control-plane URL with credentials is never printed with them, whichever check refuses it, exit 2', async (t) => {
  const dir = t.testdir({});
  for (const url of [`http://admin:${PASSWORD}@cp.example.test/`, `https://admin:${PASSWORD}@cp.example.test:99999`, `https://admin:${PASSWORD}@cp.example.test`]) {
    const result = await run(['enroll', '--control-plane', url, '--token', TOKEN, '--state-dir', path.join(dir, 's')]);
    t.equal(result.code, 2, url);
    t.match(result.stderr, /^zenova-node: --control-plane /, url);
    t.notMatch(result.stderr, PASSWORD, `${url}: not the password`);
    t.notMatch(result.stderr, 'admin:', `${url}: not the user`);
  }
  t.match(
    messageOf(() => parseCli(['enroll', '--control-plane', `http://admin:${PASSWORD}@cp.example.test/x`, '--token', TOKEN, '--state-dir', 's'])),
    /got "http:\/\/cp\.example\.test\/x"$/,
    'an http URL is shown, with its credentials removed',
  );
});

t.test('parseControlPlaneUrl (enrollment, and the installer through it) names neither a value that is no URL nor a URL\'s credentials', async (t) => {
  for (const value of [TOKEN, `${TOKEN} `, `${PASSWORD}:x`, `http://admin:${PASSWORD}@cp.example.test`]) {
    const err = (() => {
      try {
        parseControlPlaneUrl(value);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    t.type(err, EnrollError, value);
    t.equal((err as EnrollError).code, 'URL_INVALID', value);
    t.notMatch((err as Error).message, TOKEN.slice(0, 12), `${value}: no part of the token`);
    t.notMatch((err as Error).message, new RegExp(PASSWORD, 'i'), `${value}: not the password, in no case`);
    t.match((err as Error).message, /not shown: it does not look like a|got "http:\/\/cp\.example\.test\/"/, value);
  }
  t.match(messageOf(() => parseControlPlaneUrl('http://cp.example.test/')), /plain http is refused\), got "http:\/\/cp\.example\.test\/"$/, 'a plain URL is shown');
});

t.test('--listen, --admin-listen and ZENOVA_NODE_ADMIN_LISTEN show a value only when it looks like HOST:PORT', async (t) => {
  for (const [argv, env] of [
    [['serve', '--config', 'c.json', '--listen', TOKEN], {}],
    [['serve', '--config', 'c.json', '--admin-listen', TOKEN], {}],
    [['serve', '--config', 'c.json', '--admin-listen', `${TOKEN}:9100`], {}],
    [['serve', '--config', 'c.json'], { ZENOVA_NODE_ADMIN_LISTEN: `${TOKEN}:9100` }],
  ] as Array<[string[], NodeJS.ProcessEnv]>) {
    const message = messageOf(() => parseCli(argv, env));
    t.notMatch(message, TOKEN.slice(0, 12), `${JSON.stringify(argv)} ${JSON.stringify(env)}: no part of the token`);
    t.match(message, /^(--listen|--admin-listen|ZENOVA_NODE_ADMIN_LISTEN) must be .*\(not shown: it does not look like (HOST:PORT|a host name or address)\)/);
  }
  t.throws(() => parseCli(['serve', '--config', 'c.json', '--listen', 'localhost:99999']), { name: 'UsageError', message: '--listen must be HOST:PORT with a port from 0 to 65535, got "localhost:99999"' }, 'HOST:PORT is shown');
  t.throws(() => parseCli(['serve', '--config', 'c.json', '--admin-listen', '10.1.2.3:9100']), { message: /got "10\.1\.2\.3": the admin port/ }, 'a host is shown');
});

t.test('--replicas shows a value only when it is a short number; a token there is not printed, exit 2', async (t) => {
  const result = await run(['serve', '--state-dir', 'd', '--replicas', TOKEN]);
  t.equal(result.code, 2);
  t.match(result.stderr, /^zenova-node: --replicas must be a whole number from 1 to 999 .*\(not shown: it does not look like a number\)\n/);
  t.notMatch(result.stderr, TOKEN.slice(0, 12));
  t.throws(() => parseCli(['serve', '--state-dir', 'd', '--replicas', '1000']), { message: /got "1000"$/ });
});

t.test('serve\'s number and word settings from the environment show a value only when it has the shape expected', async (t) => {
  for (const name of ['ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS', 'ZENOVA_NODE_SHUTDOWN_DRAIN_MS', 'ZENOVA_SPOOL_SYNCHRONOUS']) {
    const message = messageOf(() => readServeSettings({ [name]: TOKEN }, { enrolled: true }));
    t.match(message, new RegExp(`^${name} must be .*, got a value that is not one \\(not shown: it does not look like a (number|word)\\)$`), name);
    t.notMatch(message, TOKEN.slice(0, 12), `${name}: no part of the token`);
  }
  t.throws(() => readServeSettings({ ZENOVA_NODE_SHUTDOWN_DRAIN_MS: '30000' }, { enrolled: true }), { name: 'ServeSettingError', message: /got "30000"$/ }, 'a number is shown');
  t.throws(() => readServeSettings({ ZENOVA_SPOOL_SYNCHRONOUS: 'ful' }, { enrolled: true }), { message: /got "ful"$/ }, 'a word is shown');

  t.throws(() => checkReplicasAgainstEnv(2, { ZENOVA_NODE_REPLICAS: TOKEN }), ServeSettingError);
  const disagreement = messageOf(() => checkReplicasAgainstEnv(2, { ZENOVA_NODE_REPLICAS: TOKEN }));
  t.match(disagreement, /^--replicas 2 disagrees with ZENOVA_NODE_REPLICAS \(not shown: it does not look like a number\) in the environment: /);
  t.notMatch(disagreement, TOKEN.slice(0, 12), 'ZENOVA_NODE_REPLICAS: no part of the token');
  t.match(messageOf(() => checkReplicasAgainstEnv(2, { ZENOVA_NODE_REPLICAS: '3' })), /^--replicas 2 disagrees with ZENOVA_NODE_REPLICAS="3" in the environment/, 'a number is shown');
});
