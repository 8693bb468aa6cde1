// JSON bodies are read as UTF-8 and nothing else: bytes that are not UTF-8 (Latin-1 text sent
// without a charset, as Windows PowerShell 5.1 does) are refused, not turned into U+FFFD and stored.
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { bearer, migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { app, call } = await configApp(t, db.url);

interface ErrorReply { error: { code: string; message: string } }
interface CreditReply { balance: { balanceMicros: number }; replayed: boolean }

/** A POST whose body is exactly these bytes, labelled JSON (`charset` added when given). */
const postBytes = (url: string, bytes: Buffer, charset?: string) => app.inject({
  method: 'POST', url, payload: bytes,
  headers: { ...bearer, 'content-type': charset === undefined ? 'application/json' : `application/json; charset=${charset}` },
});

/** A top-up body whose reference is `Rechnung-M` + the given bytes + `ller`. */
const topUp = (letter: Buffer): Buffer => Buffer.concat([Buffer.from('{"amountMicros": 1000000, "reference": "Rechnung-M'), letter, Buffer.from('ller"}')]);

async function newAccount(): Promise<string> {
  const name = uniqueConfigName('utf8');
  expectStatus(await call('POST', '/api/v1/accounts', { name }), 201);
  return name;
}

async function balanceOf(account: string): Promise<number> {
  return expectStatus<{ balance: { balanceMicros: number } }>(await call('GET', `/api/v1/accounts/${account}/balance`), 200).balance.balanceMicros;
}

t.test('top-up references in Latin-1 (ü, then ö) are each refused as not UTF-8; in UTF-8 they are two top-ups', async (t) => {
  const account = await newAccount();
  const url = `/api/v1/accounts/${account}/credits`;
  for (const [letter, byte] of [['ü', 0xfc], ['ö', 0xf6]] as const) {
    const res = await postBytes(url, topUp(Buffer.from([byte])));
    t.equal(res.statusCode, 400, `${letter}: ${res.body}`);
    t.match(res.json<ErrorReply>(), {
      error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /^The request body is not valid UTF-8 .*send the JSON body encoded as UTF-8\.$/ },
    }, letter);
  }
  t.equal(await balanceOf(account), 0, 'nothing credited');

  const first = await postBytes(url, topUp(Buffer.from('ü', 'utf8')));
  t.equal(first.statusCode, 201, first.body);
  const second = await postBytes(url, topUp(Buffer.from('ö', 'utf8')));
  t.equal(second.statusCode, 201, second.body);
  t.match(second.json<CreditReply>(), { replayed: false, balance: { balanceMicros: 2_000_000 } });
  const again = await postBytes(url, topUp(Buffer.from('ü', 'utf8')));
  t.match(again.json<CreditReply>(), { replayed: true, balance: { balanceMicros: 2_000_000 } }, 'the first sent again is its replay');
});

t.test('every malformed UTF-8 sequence is refused, wherever it sits in the body, whatever charset the header omits or names', async (t) => {
  const account = await newAccount();
  const url = `/api/v1/accounts/${account}/credits`;
  const bodies: Record<string, Buffer> = {
    'a lone continuation byte': topUp(Buffer.from([0x80])),
    'a sequence cut short': topUp(Buffer.from([0xc3])),
    'an overlong encoding of "/"': topUp(Buffer.from([0xc0, 0xaf])),
    'a UTF-16 surrogate encoded as UTF-8': topUp(Buffer.from([0xed, 0xa0, 0x80])),
    'a code point past U+10FFFF': topUp(Buffer.from([0xf4, 0x90, 0x80, 0x80])),
    'a byte that is never UTF-8': topUp(Buffer.from([0xff])),
    'a key in Latin-1': Buffer.concat([Buffer.from('{"amountMicros": 1, "r'), Buffer.from([0xe9]), Buffer.from('f": 1}')]),
    'a body cut inside its last character': Buffer.concat([Buffer.from('{"amountMicros": 1}'), Buffer.from([0xe2, 0x82])]),
  };
  for (const [what, body] of Object.entries(bodies)) {
    const res = await postBytes(url, body);
    t.equal(res.statusCode, 400, `${what}: ${res.body}`);
    t.match(res.json<ErrorReply>(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /not valid UTF-8/ } }, what);
  }
  const declared = await postBytes(url, topUp(Buffer.from([0xfc])), 'utf-8');
  t.match(declared.json<ErrorReply>(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /not valid UTF-8/ } }, 'charset=utf-8 declared');
  // A body declared in another charset is refused by its header, before any byte is read.
  const latin1 = await postBytes(url, topUp(Buffer.from([0xfc])), 'iso-8859-1');
  t.match(latin1, { statusCode: 415 });
  t.equal(latin1.json<ErrorReply>().error.code, 'ZN_ERR_CP_UNSUPPORTED_MEDIA_TYPE', 'charset=iso-8859-1 declared: still the 415');
  t.equal(await balanceOf(account), 0, 'nothing credited');
});

t.test('UTF-8 with a byte order mark, an empty body, a __proto__ key, a repeated key and broken JSON are answered as before', async (t) => {
  const account = await newAccount();
  const url = `/api/v1/accounts/${account}/credits`;
  const withBom = await postBytes(url, Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), topUp(Buffer.from('ü', 'utf8'))]));
  t.equal(withBom.statusCode, 201, `a leading byte order mark is skipped: ${withBom.body}`);
  const empty = await postBytes(url, Buffer.alloc(0));
  t.match(empty.json<ErrorReply>(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /body: must be a JSON object/ } }, 'an empty body is no body');
  const proto = await postBytes(url, Buffer.from('{"amountMicros": 1, "__proto__": {}}'));
  t.match(proto.json<ErrorReply>(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /"__proto__"/ } });
  const repeated = await postBytes(url, Buffer.from('{"amountMicros": 1, "amountMicros": 1000000}'));
  t.match(repeated.json<ErrorReply>(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /"amountMicros" twice/ } });
  const broken = await postBytes(url, Buffer.from('{"amountMicros": '));
  t.match(broken.json<ErrorReply>(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /not valid JSON/ } }, 'JSON that does not parse is still called so');
  t.equal(await balanceOf(account), 1_000_000, 'only the top-up with the byte order mark credited');
});
