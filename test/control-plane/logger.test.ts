import t from 'tap';
import { redactDatabaseUrl } from '../../control-plane/src/logger.js';
import { ADMIN_TOKEN, captureLogger } from './helpers.js';

const DB_PASSWORD = 'db-pass-0123456789';
const DATABASE_URL = `postgres://zenova:${DB_PASSWORD}@db.internal:5432/zenova`;

t.test('redactDatabaseUrl keeps user, host, port and database but not the password', async (t) => {
  const redacted = redactDatabaseUrl(DATABASE_URL);
  t.equal(redacted, 'postgres://zenova:***@db.internal:5432/zenova');
  t.equal(redactDatabaseUrl('postgres://zenova@db/zenova'), 'postgres://zenova@db/zenova', 'nothing to hide');
  t.notMatch(redactDatabaseUrl('postgres://u@db/z?password=hunter2hunter2'), /hunter2/, 'password query parameter');
  t.notMatch(redactDatabaseUrl('postgres://u:pa ss@@db:x/z'), /pa ss/, 'unparseable URL with userinfo');
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

t.test('the log level from the settings applies', async (t) => {
  const log = captureLogger({ logLevel: 'warn' });
  log.logger.info('hidden');
  log.logger.warn('shown');
  t.same(log.lines().map((l) => l.msg), ['shown']);
});
