/**
 * Which PostgreSQL `npm start` runs on, and what its node child is given: the embedded cluster's own
 * URL (as dev.env exports it) still starts the embedded cluster, another URL is used as given, and
 * the node never receives the control plane's secrets.
 */
import t from 'tap';
import { chooseDatabase, embeddedDatabaseUrl, isEmbeddedDatabaseUrl } from '../../control-plane/src/dev-stack/database-choice.js';
import { nodeChildEnv } from '../../control-plane/src/dev-stack/node-child-env.js';

const PASSWORD = 'dev-password_0123456789';

t.test("the embedded cluster's own URL from dev.env starts the embedded cluster", async (t) => {
  t.same(chooseDatabase(undefined, PASSWORD), { kind: 'embedded' }, 'unset');
  t.same(chooseDatabase('', PASSWORD), { kind: 'embedded' }, 'empty');
  t.same(chooseDatabase(embeddedDatabaseUrl(PASSWORD, 7432), PASSWORD), { kind: 'embedded' }, 'the URL dev.env holds');
  t.same(chooseDatabase(embeddedDatabaseUrl(PASSWORD, 40001), PASSWORD), { kind: 'embedded' }, 'with a port that has moved since');
  t.ok(isEmbeddedDatabaseUrl(`postgresql://zenova:${PASSWORD}@localhost:7432/postgres`, PASSWORD), 'written by hand');
});

t.test('any other database URL is used as given', async (t) => {
  for (const url of [
    'postgres://zenova:other-password@127.0.0.1:7432/postgres',
    `postgres://zenova:${PASSWORD}@db.internal:5432/postgres`,
    `postgres://someone:${PASSWORD}@127.0.0.1:7432/postgres`,
    `postgres://zenova:${PASSWORD}@127.0.0.1:7432/zenova`,
    `postgres://zenova:${PASSWORD}@127.0.0.1:7432/postgres?sslmode=require`,
    'postgres://zenova@127.0.0.1:5432/zenova',
    'not a url',
  ]) {
    t.same(chooseDatabase(url, PASSWORD), { kind: 'external', url }, url);
  }
});

t.test("the node child gets neither the control plane's settings nor dev.env's secrets", async (t) => {
  const env = nodeChildEnv({
    PATH: '/usr/bin',
    HOME: '/home/dev',
    NODE_OPTIONS: '--max-old-space-size=512',
    ZENOVA_NODE_REPLICAS: '1',
    ZENOVA_SPOOL_SYNCHRONOUS: 'FULL',
    ZENOVA_ADMIN_TOKEN: 'zn_admin_secret',
    ZENOVA_DATABASE_URL: embeddedDatabaseUrl(PASSWORD, 7432),
    ZENOVA_SECRET_ENC_KEY: 'key',
    ZENOVA_TLS_KEY_FILE: '/k.pem',
    ZENOVA_GATEWAY_KEY_FILE: '/g.pem',
    ZENOVA_API_KEY: 'zn_sk_demo',
    ZENOVA_CONTROL_PLANE_URL: 'https://127.0.0.1:7400',
    ZENOVA_TEST_DATABASE_URL: 'postgres://u:p@h/d',
    PGPASSWORD: 'pg-secret',
  });
  t.same(env, {
    PATH: '/usr/bin',
    HOME: '/home/dev',
    NODE_OPTIONS: '--max-old-space-size=512',
    ZENOVA_NODE_REPLICAS: '1',
    ZENOVA_SPOOL_SYNCHRONOUS: 'FULL',
  });
});
