import { randomBytes } from 'node:crypto';
import t from 'tap';
import { KEY_MISMATCH_MESSAGE, SecretBoxError, createSecretBox } from '../../control-plane/src/crypto/secret-box.js';

const key = randomBytes(32);

t.test('a sealed secret opens again with the same key and context', async (t) => {
  const box = createSecretBox(key);
  const sealed = box.seal('-----BEGIN PRIVATE KEY-----\nsecret material\n', 'purpose-a');
  t.equal(box.open(sealed, 'purpose-a').toString('utf8'), '-----BEGIN PRIVATE KEY-----\nsecret material\n');
  t.notOk(sealed.includes(Buffer.from('secret material')), 'the plaintext is not visible in the sealed bytes');
  t.equal(sealed[0], 1, 'versioned format: the first byte is the format version');
  const binary = randomBytes(100);
  t.ok(box.open(box.seal(binary)).equals(binary), 'binary data and no context work too');
  t.ok(createSecretBox(Buffer.from(key)).open(sealed, 'purpose-a'), 'a second box from the same key bytes opens it (no hidden state)');
});

t.test('sealing the same plaintext twice gives different bytes (random nonce)', async (t) => {
  const box = createSecretBox(key);
  t.notSame(box.seal('same'), box.seal('same'));
});

t.test('a different ZENOVA_SECRET_ENC_KEY is refused with a message naming the variable', async (t) => {
  const sealed = createSecretBox(key).seal('secret');
  const err = (() => {
    try {
      createSecretBox(randomBytes(32)).open(sealed);
    } catch (e) {
      return e;
    }
    return undefined;
  })();
  t.type(err, SecretBoxError);
  t.equal((err as SecretBoxError).code, 'KEY_MISMATCH');
  t.equal((err as Error).message, KEY_MISMATCH_MESSAGE);
  t.match(KEY_MISMATCH_MESSAGE, /^ZENOVA_SECRET_ENC_KEY does not match the key these secrets were encrypted with/);
});

t.test('tampering with any part of the sealed bytes is detected', async (t) => {
  const box = createSecretBox(key);
  const sealed = box.seal('a secret of some length');
  // Past the key id (bytes 1-4): nonce, ciphertext and tag must all be covered by authentication.
  for (const index of [5, 17, 20, sealed.length - 1]) {
    const copy = Buffer.from(sealed);
    copy[index] = (copy[index] ?? 0) ^ 0x01;
    t.throws(() => box.open(copy), { name: 'SecretBoxError', code: 'CORRUPT' }, `byte ${index} flipped`);
  }
  t.throws(() => box.open(sealed.subarray(0, 10)), { code: 'CORRUPT' }, 'truncated');
  const otherVersion = Buffer.from(sealed);
  otherVersion[0] = 2;
  t.throws(() => box.open(otherVersion), { code: 'UNSUPPORTED_VERSION' });
});

t.test('a secret sealed for one purpose does not open as another', async (t) => {
  const box = createSecretBox(key);
  t.throws(() => box.open(box.seal('x', 'gateway-tls-key'), 'signing-key:config'), { code: 'CORRUPT' });
});

t.test('a key of the wrong length is refused', async (t) => {
  t.throws(() => createSecretBox(randomBytes(16)), /32 bytes, got 16/);
});
