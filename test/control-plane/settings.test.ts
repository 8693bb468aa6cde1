import t from 'tap';
import { SettingsError, loadSettings } from '../../control-plane/src/settings.js';

const TOKEN = 'T'.repeat(40);
const VALID = {
  ZENOVA_DATABASE_URL: 'postgres://zenova:db-password-123@db.internal:5432/zenova',
  ZENOVA_ADMIN_TOKEN: TOKEN,
};

function problemsOf(env: NodeJS.ProcessEnv): readonly string[] {
  try {
    loadSettings(env);
  } catch (err) {
    if (err instanceof SettingsError) return err.problems;
    throw err;
  }
  throw new Error('expected loadSettings to throw SettingsError');
}

t.test('valid settings are parsed and defaults apply', async (t) => {
  const settings = loadSettings(VALID);
  t.equal(settings.databaseUrl, VALID.ZENOVA_DATABASE_URL);
  t.same(settings.listen, { host: '127.0.0.1', port: 7400 });
  t.equal(settings.adminToken, TOKEN);
  t.equal(settings.secretEncKey, undefined);
  t.equal(settings.logLevel, 'info');
  t.equal(settings.publicUrl, undefined);
});

t.test('the credit lease settings default to what docs/billing.md says and take their documented ranges', async (t) => {
  t.same(loadSettings(VALID).leases, { capMicros: 100_000_000n, sharePpm: 250_000n, refreshMs: 5000 }, 'defaults: 100 units, 0.25, 5 s');
  t.same(loadSettings({ ...VALID, ZENOVA_LEASE_CAP_MICROS: '1', ZENOVA_LEASE_SHARE: '0.000001', ZENOVA_LEASE_REFRESH_MS: '100' }).leases, { capMicros: 1n, sharePpm: 1n, refreshMs: 100 }, 'the lower ends');
  t.same(loadSettings({ ...VALID, ZENOVA_LEASE_CAP_MICROS: '999999999999999', ZENOVA_LEASE_SHARE: '1', ZENOVA_LEASE_REFRESH_MS: '999999999' }).leases, { capMicros: 999_999_999_999_999n, sharePpm: 1_000_000n, refreshMs: 999_999_999 }, 'the upper ends');
  t.equal(loadSettings({ ...VALID, ZENOVA_LEASE_SHARE: '1.000000' }).leases.sharePpm, 1_000_000n, '1 with zero decimals is 1');
  t.same(loadSettings({ ...VALID, ZENOVA_LEASE_CAP_MICROS: '', ZENOVA_LEASE_SHARE: '', ZENOVA_LEASE_REFRESH_MS: '' }).leases, { capMicros: 100_000_000n, sharePpm: 250_000n, refreshMs: 5000 }, 'empty counts as unset');
});

t.test('a credit lease setting out of its range is a problem naming the variable, the range and the value', async (t) => {
  for (const cap of ['0', '-5', '1000000000000000', '1.5', 'abc']) {
    t.same(problemsOf({ ...VALID, ZENOVA_LEASE_CAP_MICROS: cap }), [`ZENOVA_LEASE_CAP_MICROS: expected a whole number from 1 to 999999999999999, got '${cap}'`], cap);
  }
  for (const share of ['0', '0.0000001', '1.000001', '2', '.5', '25%', 'abc']) {
    t.same(problemsOf({ ...VALID, ZENOVA_LEASE_SHARE: share }), [`ZENOVA_LEASE_SHARE: expected a decimal above 0 and at most 1 with at most 6 decimals (e.g. 0.25), got '${share}'`], share);
  }
  for (const refresh of ['99', '0', '1000000000', '5s', 'abc']) {
    t.same(problemsOf({ ...VALID, ZENOVA_LEASE_REFRESH_MS: refresh }), [`ZENOVA_LEASE_REFRESH_MS: expected a whole number from 100 to 999999999, got '${refresh}'`], refresh);
  }
});

t.test('every optional variable is parsed when set', async (t) => {
  const key = Buffer.alloc(32, 7);
  const settings = loadSettings({
    ...VALID,
    ZENOVA_DATABASE_URL: 'postgresql://u@localhost/db',
    ZENOVA_LISTEN: '[::1]:0',
    ZENOVA_SECRET_ENC_KEY: key.toString('base64'),
    ZENOVA_LOG_LEVEL: 'debug',
    ZENOVA_PUBLIC_URL: 'https://zenova.example.com/',
  });
  t.same(settings.listen, { host: '::1', port: 0 }, 'IPv6 in brackets, port 0 allowed');
  t.ok(settings.secretEncKey?.equals(key));
  t.equal(settings.logLevel, 'debug');
  t.equal(settings.publicUrl, 'https://zenova.example.com');
});

t.test('a bad ZENOVA_LISTEN is reported naming the variable, the rule and the value', async (t) => {
  const problems = problemsOf({ ...VALID, ZENOVA_LISTEN: 'abc' });
  t.equal(problems.length, 1);
  t.match(problems[0], /^ZENOVA_LISTEN: expected HOST:PORT.*got 'abc'$/);
  t.match(problemsOf({ ...VALID, ZENOVA_LISTEN: '127.0.0.1:65536' })[0], /^ZENOVA_LISTEN: /, 'port above 65535');
});

t.test('missing required variables are all reported, not just the first', async (t) => {
  const problems = problemsOf({});
  t.equal(problems.length, 2);
  t.match(problems[0], /^ZENOVA_DATABASE_URL: is required/);
  t.match(problems[1], /^ZENOVA_ADMIN_TOKEN: is required/);
});

t.test('every invalid variable produces its own problem naming it', async (t) => {
  const err = (() => {
    try {
      loadSettings({
        ZENOVA_DATABASE_URL: 'mysql://root:hunter2hunter2@db/zenova',
        ZENOVA_LISTEN: 'localhost',
        ZENOVA_ADMIN_TOKEN: 'too-short-secret',
        ZENOVA_SECRET_ENC_KEY: Buffer.alloc(16).toString('base64'),
        ZENOVA_LOG_LEVEL: 'verbose',
        ZENOVA_PUBLIC_URL: 'ftp://files.example.com',
      });
    } catch (e) {
      return e;
    }
    return undefined;
  })();
  t.type(err, SettingsError);
  const problems = (err as SettingsError).problems;
  t.same(problems.map((p) => p.split(':')[0]), [
    'ZENOVA_DATABASE_URL', 'ZENOVA_LISTEN', 'ZENOVA_ADMIN_TOKEN', 'ZENOVA_SECRET_ENC_KEY', 'ZENOVA_LOG_LEVEL', 'ZENOVA_PUBLIC_URL',
  ]);
  t.match(problems[2], /at least 32 characters, got 16/);
  t.match(problems[3], /32 bytes.*got 16 bytes/);
  t.match(problems[4], /got 'verbose'/);
  t.match((err as Error).message, /ZENOVA_LISTEN: expected HOST:PORT/, 'the message carries the problems too');
});

t.test('problems never echo secret values', async (t) => {
  const problems = problemsOf({
    ZENOVA_DATABASE_URL: 'not a url but has a p@ssw0rd-secret',
    ZENOVA_ADMIN_TOKEN: 'short-but-secret-token',
    ZENOVA_SECRET_ENC_KEY: 'not*base64*secret',
  });
  const text = problems.join('\n');
  t.equal(problems.length, 3);
  t.notMatch(text, /ssw0rd-secret/);
  t.notMatch(text, /short-but-secret-token/);
  t.notMatch(text, /not\*base64\*secret/);
});

t.test('a database setting that does not parse as a URL is never quoted: a keyword DSN or a password query', async (t) => {
  for (const value of [
    'host=db.internal user=zenova password=Sup3rSecretPassw0rd dbname=zenova',
    'postgres://db:54x32/zenova?password=Sup3rSecretPassw0rd',
    'postgresql://db:99999/zenova?password=Sup3rSecretPassw0rd',
  ]) {
    const problems = problemsOf({ ZENOVA_DATABASE_URL: value });
    const text = problems.join('\n');
    t.notMatch(text, /Sup3rSecretPassw0rd/, `not in the problem: ${value.slice(0, 20)}…`);
    t.match(text, /does not parse as a URL.*the value is not shown/);
  }
  t.match(problemsOf({ ZENOVA_DATABASE_URL: 'host=db password=x' }).join('\n'), /libpq key=value connection string is not accepted/);
});

t.test('a database URL must use the postgres scheme and name a host', async (t) => {
  t.match(problemsOf({ ...VALID, ZENOVA_DATABASE_URL: 'http://db/zenova' })[0], /^ZENOVA_DATABASE_URL: .*postgres:\/\//);
  t.match(problemsOf({ ...VALID, ZENOVA_DATABASE_URL: 'postgres:///zenova' })[0], /^ZENOVA_DATABASE_URL: /);
});

t.test('a database URL whose password was written unencoded is refused without showing the password', async (t) => {
  // '/' ends the authority: the parser reads host 'zenova', port 2024 and the rest as the path.
  const password = '2024/Tr0ub4dor-horse';
  for (const url of [
    `postgres://zenova:${password}@127.0.0.1:5432/zenova`,
    'postgres://zenova:2024?Tr0ub4dor-horse@127.0.0.1:5432/zenova',
    'postgres://zenova:2024#Tr0ub4dor-horse@127.0.0.1:5432/zenova',
    'postgres://zenova@127.0.0.1:5432/zen/Tr0ub4dor-horse',
  ]) {
    const problems = problemsOf({ ...VALID, ZENOVA_DATABASE_URL: url });
    t.equal(problems.length, 1, url);
    t.match(problems[0], /^ZENOVA_DATABASE_URL: cannot be read unambiguously/, 'names the variable');
    t.match(problems[0], /percent-encode the user name and password/, 'tells the operator what to do');
    t.notMatch(problems[0], /Tr0ub4dor/, 'never shows the password');
    t.notMatch(problems[0], /127\.0\.0\.1/, 'nor any other part of the URL');
  }
  const unparseable = problemsOf({ ...VALID, ZENOVA_DATABASE_URL: 'postgres://zenova:pass/Tr0ub4dor-horse@127.0.0.1:5432/zenova' });
  t.match(unparseable[0], /^ZENOVA_DATABASE_URL: .*percent-encode/, 'a URL the parser refuses gets the same advice');
  t.notMatch(unparseable[0], /Tr0ub4dor/);
});

t.test('a database password percent-encoded with encodeURIComponent is accepted as it is', async (t) => {
  const password = '2024/Tr0ub4dor?horse#@:%';
  const url = `postgres://zenova:${encodeURIComponent(password)}@127.0.0.1:5432/zenova`;
  const settings = loadSettings({ ...VALID, ZENOVA_DATABASE_URL: url });
  t.equal(settings.databaseUrl, url);
  const parsed = new URL(settings.databaseUrl);
  t.equal(parsed.hostname, '127.0.0.1');
  t.equal(parsed.port, '5432');
  t.equal(decodeURIComponent(parsed.password), password, 'pg reads back the password as written');
  t.equal(loadSettings({ ...VALID, ZENOVA_DATABASE_URL: 'postgres://u:p@db/zen?application_name=a%40b' }).databaseUrl, 'postgres://u:p@db/zen?application_name=a%40b', "an encoded '@' in a parameter is fine");
});

t.test('an admin token with spaces is refused (it travels in a header)', async (t) => {
  t.match(problemsOf({ ...VALID, ZENOVA_ADMIN_TOKEN: `${TOKEN} with space` })[0], /^ZENOVA_ADMIN_TOKEN: expected visible ASCII/);
});

t.test('an admin token longer than the console login takes (512) is refused at start, without echoing it', async (t) => {
  const long = 'A'.repeat(513);
  const problems = problemsOf({ ...VALID, ZENOVA_ADMIN_TOKEN: long });
  t.match(problems[0], /^ZENOVA_ADMIN_TOKEN: expected at most 512 characters, got 513/);
  t.notOk(problems.join('\n').includes(long));
  t.equal(loadSettings({ ...VALID, ZENOVA_ADMIN_TOKEN: 'B'.repeat(512) }).adminToken, 'B'.repeat(512), '512 characters are taken');
});

t.test('an empty optional variable counts as unset', async (t) => {
  const settings = loadSettings({ ...VALID, ZENOVA_LISTEN: '', ZENOVA_PUBLIC_URL: '', ZENOVA_SECRET_ENC_KEY: '' });
  t.same(settings.listen, { host: '127.0.0.1', port: 7400 });
  t.equal(settings.publicUrl, undefined);
  t.equal(settings.secretEncKey, undefined);
});

t.test('ZENOVA_TRUSTED_PROXIES takes addresses, CIDRs and proxy-addr range names; anything else is refused', async (t) => {
  t.same(loadSettings(VALID).trustedProxies, [], 'none by default');
  t.same(loadSettings({ ...VALID, ZENOVA_TRUSTED_PROXIES: ' 10.0.0.0/8, 192.168.1.5 ,fd00::/8,Loopback,10.0.0.0/8' }).trustedProxies, ['10.0.0.0/8', '192.168.1.5', 'fd00::/8', 'loopback']);
  for (const bad of ['10.0.0.0/33', 'proxy.example.com', '10.0.0.1/8/1', '::1/129', '*']) {
    t.match(problemsOf({ ...VALID, ZENOVA_TRUSTED_PROXIES: bad })[0], /^ZENOVA_TRUSTED_PROXIES: expected IP addresses, CIDRs/, bad);
  }
});

t.test('a ZENOVA_PUBLIC_URL with a query or fragment is refused: the console address and the wizard default are built on it', async (t) => {
  for (const value of ['https://zenova.example.com/?x=1', 'https://zenova.example.com/#top', 'https://zenova.example.com/base?']) {
    const err = (() => {
      try {
        loadSettings({ ...VALID, ZENOVA_PUBLIC_URL: value });
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    t.type(err, SettingsError, value);
    t.match((err as SettingsError).problems.join('\n'), /ZENOVA_PUBLIC_URL: expected a URL without a query \(\?…\) or fragment \(#…\)/, value);
  }
  t.equal(loadSettings({ ...VALID, ZENOVA_PUBLIC_URL: 'https://zenova.example.com/base/' }).publicUrl, 'https://zenova.example.com/base');
});
