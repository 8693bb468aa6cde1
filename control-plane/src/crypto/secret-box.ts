/**
 * Secrets at rest in PostgreSQL (the gateway TLS key, the config-signing key), sealed with
 * AES-256-GCM under ZENOVA_SECRET_ENC_KEY.
 *
 * Sealed format, version 1:
 *   0x01 | key id (4 bytes) | nonce (12 random bytes) | ciphertext | GCM tag (16 bytes)
 * The key id (a truncated HMAC of the key, not the key) tells "wrong ZENOVA_SECRET_ENC_KEY" apart
 * from "the stored bytes were damaged"; the version byte leaves room for another scheme later.
 * An optional context string is bound in as associated data, so a secret sealed for one purpose
 * cannot be passed off as another.
 */
import { createCipheriv, createDecipheriv, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

const VERSION = 0x01;
const KEY_BYTES = 32;
const KEY_ID_BYTES = 4;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const HEADER_BYTES = 1 + KEY_ID_BYTES + NONCE_BYTES;

export const KEY_MISMATCH_MESSAGE = 'ZENOVA_SECRET_ENC_KEY does not match the key these secrets were encrypted with';

export type SecretBoxErrorCode = 'KEY_MISMATCH' | 'CORRUPT' | 'UNSUPPORTED_VERSION';

export class SecretBoxError extends Error {
  readonly code: SecretBoxErrorCode;
  constructor(code: SecretBoxErrorCode, message: string) {
    super(message);
    this.name = 'SecretBoxError';
    this.code = code;
  }
}

export interface SecretBox {
  /** Encrypts `plaintext`; every call uses a fresh random nonce. */
  seal(plaintext: Uint8Array | string, context?: string): Buffer;
  /** Decrypts and authenticates; throws SecretBoxError when the key is wrong or the data damaged. */
  open(sealed: Uint8Array, context?: string): Buffer;
}

function keyIdOf(key: Buffer): Buffer {
  return createHmac('sha256', key).update('zenova secret-box key id').digest().subarray(0, KEY_ID_BYTES);
}

export function createSecretBox(key: Buffer): SecretBox {
  if (key.length !== KEY_BYTES) throw new Error(`ZENOVA_SECRET_ENC_KEY must be ${KEY_BYTES} bytes, got ${key.length}`);
  // Copied so a caller zeroing or reusing its buffer cannot change our key.
  const secret = Buffer.from(key);
  const keyId = keyIdOf(secret);

  const aad = (header: Buffer, context: string | undefined): Buffer => Buffer.concat([header, Buffer.from(context ?? '', 'utf8')]);

  return {
    seal(plaintext, context) {
      const nonce = randomBytes(NONCE_BYTES);
      const header = Buffer.concat([Buffer.from([VERSION]), keyId, nonce]);
      const cipher = createCipheriv('aes-256-gcm', secret, nonce, { authTagLength: TAG_BYTES });
      cipher.setAAD(aad(header, context));
      const data = typeof plaintext === 'string' ? Buffer.from(plaintext, 'utf8') : plaintext;
      const body = Buffer.concat([cipher.update(data), cipher.final()]);
      return Buffer.concat([header, body, cipher.getAuthTag()]);
    },
    open(sealed, context) {
      const bytes = Buffer.from(sealed.buffer, sealed.byteOffset, sealed.byteLength);
      if (bytes.length < HEADER_BYTES + TAG_BYTES) {
        throw new SecretBoxError('CORRUPT', 'an encrypted secret in the database is truncated or not in the expected format');
      }
      if (bytes[0] !== VERSION) {
        throw new SecretBoxError('UNSUPPORTED_VERSION', `an encrypted secret in the database uses format version ${bytes[0]}, which this zenova-control does not know (run a newer version)`);
      }
      const header = bytes.subarray(0, HEADER_BYTES);
      if (!timingSafeEqual(header.subarray(1, 1 + KEY_ID_BYTES), keyId)) {
        throw new SecretBoxError('KEY_MISMATCH', KEY_MISMATCH_MESSAGE);
      }
      const nonce = header.subarray(1 + KEY_ID_BYTES);
      const decipher = createDecipheriv('aes-256-gcm', secret, nonce, { authTagLength: TAG_BYTES });
      decipher.setAAD(aad(header, context));
      decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
      try {
        return Buffer.concat([decipher.update(bytes.subarray(HEADER_BYTES, bytes.length - TAG_BYTES)), decipher.final()]);
      } catch {
        // The key id matched, so the key is right (barring a 1-in-2^32 collision): the bytes changed.
        throw new SecretBoxError('CORRUPT', 'an encrypted secret in the database failed its integrity check (damaged or tampered with); restore it from a backup');
      }
    },
  };
}
