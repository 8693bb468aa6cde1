/**
 * The control plane's Ed25519 config-signing key. Generated once per installation (replicas starting
 * together take turns on an advisory lock, so there is one key), stored in `signing_keys` with the
 * private half sealed by ZENOVA_SECRET_ENC_KEY. Nodes receive the public half at enrollment and
 * refuse any config bundle it does not verify.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, sign as signWith } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import type pg from 'pg';
import type { SecretBox } from '../crypto/secret-box.js';

/** Fixed advisory-lock key for first generation, shared by every replica ("zenova" + 0004). */
export const SIGNING_KEY_LOCK_KEY = BigInt('0x7a656e6f76610004').toString();
const KIND = 'config';
const KEY_CONTEXT = 'signing-key:config';

export interface ConfigSigningKey {
  /** SPKI PEM of the Ed25519 public key, as handed to nodes. */
  publicKeyPem: string;
  /** Ed25519 signature (64 bytes) over `data`. */
  sign(data: Uint8Array): Uint8Array;
}

export class SigningKeyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SigningKeyError';
  }
}

interface Row { public_key_pem: string; private_key_encrypted: Buffer }

async function readActive(db: pg.Pool | pg.PoolClient): Promise<Row | undefined> {
  const { rows } = await db.query<Row>(
    'select public_key_pem, private_key_encrypted from signing_keys where kind = $1 and retired_at is null',
    [KIND],
  );
  return rows[0];
}

async function createOnce(pool: pg.Pool, secretBox: SecretBox): Promise<Row> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    await client.query('select pg_advisory_xact_lock($1::bigint)', [SIGNING_KEY_LOCK_KEY]);
    let row = await readActive(client);
    if (!row) {
      const { publicKey, privateKey } = generateKeyPairSync('ed25519');
      const der = privateKey.export({ type: 'pkcs8', format: 'der' });
      row = {
        public_key_pem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
        private_key_encrypted: secretBox.seal(der, KEY_CONTEXT),
      };
      await client.query(
        'insert into signing_keys (kind, public_key_pem, private_key_encrypted) values ($1, $2, $3)',
        [KIND, row.public_key_pem, row.private_key_encrypted],
      );
    }
    await client.query('commit');
    return row;
  } catch (err) {
    await client.query('rollback').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

function publicPemOf(key: KeyObject): string {
  const publicKey = key.type === 'public' ? key : createPublicKey(key);
  return publicKey.export({ type: 'spki', format: 'pem' }).toString();
}

export async function loadConfigSigningKey(pool: pg.Pool, secretBox: SecretBox): Promise<ConfigSigningKey> {
  const row = (await readActive(pool)) ?? (await createOnce(pool, secretBox));
  // A wrong ZENOVA_SECRET_ENC_KEY surfaces here as SecretBoxError with its own clear message.
  const privateKey = createPrivateKey({ key: secretBox.open(row.private_key_encrypted, KEY_CONTEXT), format: 'der', type: 'pkcs8' });
  if (privateKey.asymmetricKeyType !== 'ed25519' || publicPemOf(privateKey) !== publicPemOf(createPublicKey(row.public_key_pem))) {
    throw new SigningKeyError('the stored config-signing key is inconsistent (its private half does not match its public half); restore signing_keys from a backup');
  }
  const publicKeyPem = publicPemOf(privateKey);
  return {
    publicKeyPem,
    sign: (data) => new Uint8Array(signWith(null, data, privateKey)),
  };
}
