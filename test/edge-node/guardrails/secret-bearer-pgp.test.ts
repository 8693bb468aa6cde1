// The secret detector finds `Bearer` tokens (after an Authorization header name, or alone when the
// token looks like one) and OpenPGP private key armour, leaves the word "bearer" in prose and public
// PGP blocks alone, and masks both alike streamed at any split and whole.
import t from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import type { PolicySide } from '../../../edge-node/src/guardrails/compiled-policy.js';
import type { Detector } from '../../../edge-node/src/guardrails/detectors/detector.js';
import { findSecrets, secretDetector } from '../../../edge-node/src/guardrails/detectors/secret.js';
import { TextGuard, VerdictTally } from '../../../edge-node/src/guardrails/text-guard.js';
import { policy } from './guardrail-fixtures.js';

const found = (text: string): string[] => findSecrets(text).map((m) => text.slice(m.start, m.end));
const SECRET_ONLY = compilePolicy(policy('secret', [{ detector: 'secret', action: 'mask', on: 'output' }])).output;
const BLOCK_SECRET = compilePolicy(policy('secret-block', [{ detector: 'secret', action: 'block', on: 'output' }])).output;
const FILLER = 'Some ordinary words in between, numbers 2024 and 42, nothing to hide here at all. Really nothing, just prose. ';

function whole(side: PolicySide, text: string): string {
  return new TextGuard(side, new VerdictTally('p', 'output', [])).whole(text);
}

function streamed(side: PolicySide, deltas: string[]): { text: string; blocked: boolean } {
  const guard = new TextGuard(side, new VerdictTally('p', 'output', []));
  const text = deltas.map((d) => guard.push(d)).join('') + guard.end();
  return { text, blocked: guard.blockedBy !== null };
}

t.test('secret finds a Bearer token after an Authorization header name, in headers, curl and JSON', async (t) => {
  t.same(found('Authorization: Bearer abcdefghIJKL'), ['abcdefghIJKL'], 'the token is the match');
  t.same(found('curl -H "Authorization: Bearer 0a1b2c3d4e5f" https://api.example.com'), ['0a1b2c3d4e5f']);
  t.same(found('{"headers": {"authorization": "Bearer ya29.a0AfH6SMBx-yz_12=="}}'), ['ya29.a0AfH6SMBx-yz_12=='], 'lower case, JSON, padding');
  t.same(found('Proxy-Authorization: bearer Zm9vYmFyYmF6cXV4'), ['Zm9vYmFyYmF6cXV4']);
  t.same(found('Authorization=Bearer mF_9.B5f-4.1JqM'), ['mF_9.B5f-4.1JqM'], 'the RFC 6750 example');
});

t.test('secret finds a Bearer token without a header name when it has 16 characters and a digit', async (t) => {
  t.same(found('Call it with Bearer 9f86d081884c7d659a2feaa0c55ad015 as the credential.'), ['9f86d081884c7d659a2feaa0c55ad015']);
  t.same(found('BEARER 1234567890abcdefXYZ'), ['1234567890abcdefXYZ']);
  t.same(found('Bearer Bearer 1234567890abcdefgh'), ['1234567890abcdefgh'], 'after a "Bearer" that is no token');
});

t.test('secret leaves the word bearer in prose and code placeholders alone', async (t) => {
  t.same(found('The bearer of this cheque is paid. Bearer tokens expire; bearer authentication is RFC 6750.'), []);
  t.same(found('headers = {"Authorization": "Bearer " + token} or f"Bearer {token}" or `Bearer ${token}` or Bearer <token>'), []);
  t.same(found('Authorization: Bearer credentials are sent; Authorization: Bearer undefined'), [], 'a word in small letters after the header');
  t.same(found('Bearer abcdefghijklmnopqrstuvwxyz, Bearer 12345 and xBearer 1234567890abcdefgh'), [], 'no digit, too short, glued to a word');
  t.same(found('WWW-Authenticate: Bearer realm="example", error="invalid_token"'), [], 'a challenge, not a credential');
});

t.test('secret finds OpenPGP private key armour, closed or not, and leaves public PGP blocks alone', async (t) => {
  const key = '-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF0aBcDEAQgA1x2y3z\n=abcd\n-----END PGP PRIVATE KEY BLOCK-----';
  t.same(found(`my key:\n${key}\nthanks`), [key]);
  t.same(found('-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF0a'), ['-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF0a'], 'an unterminated block to the end');
  t.same(found('-----BEGIN PGP PUBLIC KEY BLOCK-----\nmQINBF\n-----END PGP PUBLIC KEY BLOCK-----'), []);
  t.same(found('-----BEGIN PGP SIGNATURE-----\niQIzBAEB\n-----END PGP SIGNATURE-----'), []);
  t.same(found('-----BEGIN PGP MESSAGE-----\nhQEMA\n-----END PGP MESSAGE-----'), []);
});

t.test('Bearer tokens and PGP private keys are masked streamed at every split as in the whole text, and blocked without any of them sent', async (t) => {
  const pgp = '-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF0aBcDEAQgA1x2y3zABCDEFGH\nIJKLMNOP0123456789\n=abcd\n-----END PGP PRIVATE KEY BLOCK-----';
  const text =
    `${FILLER}curl -H "Authorization:     Bearer abcdefghIJKLmnop" https://x ${FILLER}` +
    `the bearer of this note. Use Bearer 9f86d081884c7d659a2feaa0c55ad015 then ${FILLER}${pgp}\n${FILLER}`;
  const expected =
    `${FILLER}curl -H "Authorization:     Bearer [SECRET]" https://x ${FILLER}` +
    `the bearer of this note. Use Bearer [SECRET] then ${FILLER}[SECRET]\n${FILLER}`;
  t.equal(whole(SECRET_ONLY, text), expected);
  let failures = 0;
  const check = (deltas: string[], how: string): void => {
    const got = streamed(SECRET_ONLY, deltas).text;
    const blocked = streamed(BLOCK_SECRET, deltas);
    const leaked = ['abcdefghIJ', '9f86d08188', 'lQOYBF0a', 'IJKLMNOP'].some((s) => blocked.text.includes(s));
    if (got === expected && blocked.blocked && !leaked) return;
    failures++;
    if (failures <= 3) t.fail(how, { got, blocked: blocked.blocked, leaked });
  };
  for (let i = 0; i <= text.length; i++) check([text.slice(0, i), text.slice(i)], `split at ${i}`);
  for (let i = 0; i <= text.length; i += 13) for (let j = i; j <= text.length; j += 13) check([text.slice(0, i), text.slice(i, j), text.slice(j)], `split at ${i}, ${j}`);
  for (let size = 1; size <= 24; size++) {
    const deltas: string[] = [];
    for (let at = 0; at < text.length; at += size) deltas.push(text.slice(at, at + size));
    check(deltas, `deltas of ${size}`);
  }
  t.equal(failures, 0, 'every split masks and blocks as the whole text');
});

t.test('secret leaves dates, paths and digit runs after a bare "bearer" alone, and capital placeholders after an Authorization name', async (t) => {
  t.same(found('payment to bearer 2024-01-15/INV-0000012345 due'), [], 'a date and an invoice path');
  t.same(found('payment to bearer 2024-01-15-INV0000012345abc due'), [], 'a token starting like a date');
  t.same(found('Install to bearer /usr/local/lib/python3.11/site-packages'), [], 'an absolute path');
  t.same(found('copy it to bearer lib/python3.11/site-packages and bearer ~/python311packages'), [], 'relative and home paths');
  t.same(found('bearer 1234567890123456'), [], 'digits only: no letters');
  const placeholders = ['YOURTOKEN', 'ACCESS-TOKEN', 'YOUR_ACCESS_TOKEN', 'TOKEN', '<token>', '$TOKEN', '${ACCESS_TOKEN}', '<YOUR_API_TOKEN>'];
  for (const p of placeholders) t.same(found(`curl -H "Authorization: Bearer ${p}" https://api.example.com`), [], `Authorization: Bearer ${p}`);
  t.same(whole(BLOCK_SECRET, 'curl -H "Authorization: Bearer YOURTOKEN" https://x'), 'curl -H "Authorization: Bearer YOURTOKEN" https://x');
});

t.test('secret still finds JWTs, sk- keys and hex or base64 tokens after Bearer, in and out of an Authorization header', async (t) => {
  const tokens = [
    'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U',
    'sk-proj-abcdefghijklmnopqrstuvwxyz012345',
    '9f86d081884c7d659a2feaa0c55ad015a3bf4f1b',
    'Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFi==',
    'A1B2C3D4E5F6A7B8C9D0E1F2',
  ];
  for (const token of tokens) {
    t.same(found(`Authorization: Bearer ${token}`), [token], `in a header: ${token}`);
    t.equal(whole(SECRET_ONLY, `use Bearer ${token} for it`), 'use Bearer [SECRET] for it', `alone: ${token}`);
  }
});

t.test('placeholders, paths and real Bearer tokens are masked streamed at every split as in the whole text', async (t) => {
  const text =
    `${FILLER}payment to bearer 2024-01-15/INV-0000012345 due. Install to bearer /usr/local/lib/python3.11/site-packages ` +
    `curl -H "Authorization: Bearer YOURTOKEN" and -H "Authorization: Bearer Zm9vYmFyYmF6cXV4MTIzNDU2" ${FILLER}` +
    `Authorization: Bearer Authorization: Bearer Authorization: Bearer a1b2c3d4e5f6a7b8c9d0 ${FILLER}`;
  const expected = whole(SECRET_ONLY, text);
  t.ok(expected.includes('bearer 2024-01-15/INV-0000012345 due') && expected.includes('bearer /usr/local/lib') && expected.includes('Bearer YOURTOKEN"'), 'dates, paths and placeholders stay');
  t.notOk(expected.includes('Zm9vYmFy') || expected.includes('a1b2c3d4'), 'the real tokens are masked');
  let failures = 0;
  for (let size = 1; size <= 40; size++) {
    const deltas: string[] = [];
    for (let at = 0; at < text.length; at += size) deltas.push(text.slice(at, at + size));
    const got = streamed(SECRET_ONLY, deltas).text;
    if (got !== expected && ++failures <= 3) t.fail(`deltas of ${size}`, { got, expected });
  }
  for (let i = 0; i <= text.length; i++) {
    const got = streamed(SECRET_ONLY, [text.slice(0, i), text.slice(i)]).text;
    if (got !== expected && ++failures <= 3) t.fail(`split at ${i}`, { got, expected });
  }
  t.equal(failures, 0);
});

t.test('a stream of chained "Authorization: Bearer" headers is scanned a bounded number of times per character', async (t) => {
  let scannedChars = 0;
  let longestScan = 0;
  const counting: Detector = {
    ...secretDetector,
    find: (text, from, matchedTo) => {
      scannedChars += text.length;
      longestScan = Math.max(longestScan, text.length);
      return secretDetector.find(text, from, matchedTo);
    },
  };
  const side: PolicySide = { rules: [{ index: 0, detector: counting, action: 'mask' }], broken: null, window: counting.window };
  const text = 'Authorization: Bearer '.repeat(8000); // 176 000 characters
  const deltas: string[] = [];
  for (let at = 0; at < text.length; at += 64) deltas.push(text.slice(at, at + 64));
  const got = streamed(side, deltas).text;
  t.equal(got, whole(SECRET_ONLY, text), 'masked as the whole text');
  // Each scan reads the context, the window and the release step (~64 + 128 + 32 characters) for
  // every ~32 characters released: a few times the text. Holding the chain rescanned up to the hold
  // cap (64 Ki characters) on every delta: hundreds of times the text.
  t.ok(scannedChars < 20 * text.length, `scanned ${scannedChars} characters for ${text.length}`);
  t.ok(longestScan < 8 * counting.window, `the longest scan read ${longestScan} characters: the chain is released as it comes, not held to the cap`);
});
