import { createPublicKey, randomBytes, verify } from 'node:crypto';
import type pg from 'pg';
import t from 'tap';
import { loadConfigSigningKey } from '../../control-plane/src/config/signing-key.js';
import { createSecretBox, KEY_MISMATCH_MESSAGE } from '../../control-plane/src/crypto/secret-box.js';
import { migrate } from '../../control-plane/src/db/migrate.js';
import { createPool } from '../../control-plane/src/db/pool.js';
import { testDatabase } from '../fixtures/postgres.js';
import { freshDatabase } from './helpers.js';

const server = await testDatabase(t);
const secretBox = createSecretBox(randomBytes(32));

// All these helpers need of a test is somewhere to register teardown.
interface T { teardown(fn: () => unknown): void }

async function poolFor(t: T, url: string): Promise<pg.Pool> {
  const pool = createPool({ databaseUrl: url });
  t.teardown(() => pool.end());
  await migrate(pool);
  return pool;
}

t.test('the config-signing key is generated once, stored sealed, and signs verifiably', async (t) => {
  const pool = await poolFor(t, await freshDatabase(t, server.url));
  const key = await loadConfigSigningKey(pool, secretBox);
  t.equal(createPublicKey(key.publicKeyPem).asymmetricKeyType, 'ed25519');
  const data = Buffer.from('config bundle v1');
  const signature = key.sign(data);
  t.equal(signature.length, 64);
  t.ok(verify(null, data, key.publicKeyPem, signature), 'the public half verifies the signature');
  t.notOk(verify(null, Buffer.from('config bundle v2'), key.publicKeyPem, signature), 'and only for the signed data');

  const again = await loadConfigSigningKey(pool, secretBox);
  t.equal(again.publicKeyPem, key.publicKeyPem, 'a restart loads the same key');
  t.ok(verify(null, data, key.publicKeyPem, again.sign(data)));

  const { rows } = await pool.query<{ kind: string; public_key_pem: string; private_key_encrypted: Buffer }>('select kind, public_key_pem, private_key_encrypted from signing_keys');
  t.equal(rows.length, 1);
  t.equal(rows[0]?.kind, 'config');
  t.equal(rows[0]?.public_key_pem, key.publicKeyPem);
  t.equal(rows[0]?.private_key_encrypted[0], 1, 'sealed by the secret box (format version 1)');
});

t.test('two replicas starting together on a fresh database end with one signing key', async (t) => {
  const url = await freshDatabase(t, server.url);
  const [a, b] = await Promise.all([
    poolFor(t, url).then((pool) => loadConfigSigningKey(pool, secretBox)),
    poolFor(t, url).then((pool) => loadConfigSigningKey(pool, secretBox)),
  ]);
  t.equal(a.publicKeyPem, b.publicKeyPem);
  const pool = await poolFor(t, url);
  const { rows } = await pool.query<{ n: number }>('select count(*)::int as n from signing_keys');
  t.equal(rows[0]?.n, 1);
});

t.test('a wrong ZENOVA_SECRET_ENC_KEY is refused with a clear message', async (t) => {
  const pool = await poolFor(t, await freshDatabase(t, server.url));
  await loadConfigSigningKey(pool, secretBox);
  await t.rejects(loadConfigSigningKey(pool, createSecretBox(randomBytes(32))), { name: 'SecretBoxError', message: KEY_MISMATCH_MESSAGE });
});
