import t from 'tap';
import { describeDatabaseTarget } from '../../control-plane/src/db/pool.js';
import { redactDatabaseUrl, redactRequestUrl, redactUrlPasswords } from '../../control-plane/src/logger.js';
import { ADMIN_TOKEN, captureLogger } from './helpers.js';

const DB_PASSWORD = 'db-pass-0123456789';
const DATABASE_URL = `postgres://zenova:${DB_PASSWORD}@db.internal:5432/zenova`;

t.test('redactDatabaseUrl keeps user, host, port and database but not the password', async (t) => {
  const redacted = redactDatabaseUrl(DATABASE_URL);
  t.equal(redacted, 'postgres://zenova:***@db.internal:5432/zenova');
  t.equal(redactDatabaseUrl('postgres://zenova@db/zenova'), 'postgres://zenova@db/zenova', 'nothing to hide');
  t.notMatch(redactDatabaseUrl('postgres://u@db/z?password=hunter2hunter2'), /hunter2/, 'password query parameter');
  t.notMatch(redactDatabaseUrl('postgres://u:pa ss@@db:x/z'), /pa ss/, 'unparseable URL with userinfo');
  t.notMatch(redactDatabaseUrl('host=db user=u password=hunter2hunter2'), /hunter2/, 'a libpq keyword string');
  t.notMatch(redactDatabaseUrl('postgres://db:54x32/z?password=hunter2hunter2'), /hunter2/, 'unparseable URL with a password query');
});

t.test('a database URL with an unencoded password is never shown with that password', async (t) => {
  // The parser reads host 'zenova', port 2024 and a path holding the rest of the password.
  const url = 'postgres://zenova:2024/Tr0ub4dor-horse@127.0.0.1:5432/zenova';
  t.notMatch(redactDatabaseUrl(url), /Tr0ub4dor/, 'redactDatabaseUrl');
  t.notMatch(describeDatabaseTarget(url), /Tr0ub4dor|2024/, 'the "cannot reach the database at" target');
  t.equal(redactUrlPasswords(`could not connect to ${url} now`), 'could not connect to postgres://zenova:***@127.0.0.1:5432/zenova now', 'the last-resort scrub of free text');
  t.equal(redactUrlPasswords('postgres://u:p@ss@db/zenova'), 'postgres://u:***@db/zenova', "a password with an '@' in it");
  t.equal(describeDatabaseTarget('postgres://u:p@db:5433/zenova'), 'db:5433/zenova as u', 'an ordinary URL is described as before');
  t.equal(describeDatabaseTarget('postgres://u:p@db/a%40b'), 'db:5432/(database name not shown) as u', "a database name with '@' is not shown");
  const log = captureLogger({ logLevel: 'info', databaseUrl: url });
  log.logger.info({ database: redactDatabaseUrl(url) }, 'connecting to the database');
  log.logger.error(`cannot reach the database at ${describeDatabaseTarget(url)}: refused by ${url}`);
  t.notMatch(log.text(), /Tr0ub4dor/, 'the log lines the control plane writes at start-up');
});

t.test('secrets under sensitive key names are censored at any depth', async (t) => {
  const log = captureLogger({ logLevel: 'info' });
  const secret = 'value-that-must-not-appear';
  log.logger.info({
    token: secret,
    adminToken: secret,
    ZENOVA_ADMIN_TOKEN: secret,
    password: secret,
    apiKey: secret,
    credential: secret,
    privateKey: secret,
    clientSecret: secret,
    req: { headers: { authorization: `Bearer ${secret}`, 'x-api-key': secret, cookie: `s=${secret}` } },
    deep: { er: { still: { install_token: secret, list: [{ password: secret }] } } },
  }, 'an event');
  const text = log.text();
  t.notMatch(text, secret);
  const line = log.lines()[0]!;
  t.equal(line.token, '[Redacted]', 'the key stays, so one can see something was there');
  t.equal(line.msg, 'an event');
});

t.test('ids of keys and credentials stay in the log, so who created or revoked which key can be audited', async (t) => {
  const log = captureLogger({ logLevel: 'info' });
  const id = '6f1c2d3e-4b5a-4c6d-8e9f-0a1b2c3d4e5f';
  log.logger.info({ apiKeyId: id, credential_id: id, apiKeyIds: [id], apiKey: 'zk_secret-value-0123456789' }, 'API key revoked');
  const line = log.lines()[0]!;
  t.equal(line.apiKeyId, id);
  t.equal(line.credential_id, id);
  t.same(line.apiKeyIds, [id]);
  t.equal(line.apiKey, '[Redacted]', 'the key itself still is not');
});

t.test('token counts and other ordinary fields are not censored', async (t) => {
  const log = captureLogger({ logLevel: 'info' });
  log.logger.info({ prompt_tokens: 12, completion_tokens: 34, tokensPerMinute: 1000, node: 'office-primary' }, 'usage');
  const line = log.lines()[0]!;
  t.equal(line.prompt_tokens, 12);
  t.equal(line.completion_tokens, 34);
  t.equal(line.tokensPerMinute, 1000);
  t.equal(line.node, 'office-primary');
});

t.test('the logged object itself is not modified by redaction', async (t) => {
  const log = captureLogger({ logLevel: 'info' });
  const event = { auth: { token: 'abc' } };
  log.logger.info(event, 'x');
  t.equal(event.auth.token, 'abc');
});

t.test('the admin token and the database password are scrubbed from messages, bindings and errors', async (t) => {
  const log = captureLogger({ logLevel: 'info', adminToken: ADMIN_TOKEN, databaseUrl: DATABASE_URL });
  log.logger.info(`someone pasted ${ADMIN_TOKEN} into a message`);
  log.logger.info({ database: DATABASE_URL }, 'connecting');
  log.logger.info(`raw url in text: ${DATABASE_URL}`);
  log.logger.child({ note: ADMIN_TOKEN }).info('child logger');
  log.logger.error({ err: new Error(`could not connect to ${DATABASE_URL} with ${ADMIN_TOKEN}`) }, 'failure');
  const text = log.text();
  t.notMatch(text, ADMIN_TOKEN);
  t.notMatch(text, DB_PASSWORD);
  t.match(text, 'postgres://zenova:***@db.internal:5432/zenova', 'the URL stays useful');
  t.equal(log.lines().length, 5);
});

t.test("a request URL's query values named key, sig or signature are censored, as token and api_key ones are", async (t) => {
  t.equal(
    redactRequestUrl('/api/v1/nodes?access_token=A1&key=AIzaSECRET&Sig=S1&api-key=K1&limit=5'),
    '/api/v1/nodes?access_token=%5BRedacted%5D&key=%5BRedacted%5D&Sig=%5BRedacted%5D&api-key=%5BRedacted%5D&limit=5',
  );
  t.equal(redactRequestUrl('/api/v1/requests?keyId=k1&limit=5'), '/api/v1/requests?keyId=k1&limit=5', 'an id is not a secret');
});

t.test('the log level from the settings applies', async (t) => {
  const log = captureLogger({ logLevel: 'warn' });
  log.logger.info('hidden');
  log.logger.warn('shown');
  t.same(log.lines().map((l) => l.msg), ['shown']);
});

t.test("an HTTP parser error's raw request bytes are not logged, even as a byte array", async (t) => {
  const log = captureLogger({ logLevel: 'trace', adminToken: ADMIN_TOKEN });
  const err = Object.assign(new Error('Parse Error: Invalid header value char'), {
    code: 'HPE_INVALID_HEADER_TOKEN',
    rawPacket: Buffer.from(`GET / HTTP/1.1\r\nAuthorization: Bearer ${ADMIN_TOKEN}\r\n\r\n`),
  });
  log.logger.trace({ err }, 'client error');
  const [line] = log.lines();
  t.match(line, { err: { code: 'HPE_INVALID_HEADER_TOKEN', rawPacket: '[Redacted]' } });
  t.notMatch(log.text(), /"data":\[/, 'no byte array');
});
