// The records list's cursor: every cursor the API issues pages on, and a tampered one is a 400.
import t from 'tap';
import { MAX_RECORD_UNIX_MS } from '../../../proto/src/index.js';
import { ingestRecords } from '../../../control-plane/src/records/record-ingestion.js';
import { encodeCursor, MAX_CURSOR_LENGTH } from '../../../control-plane/src/records/record-cursor.js';
import { testDatabase } from '../../fixtures/postgres.js';
import { configApp } from '../config-harness.js';
import { migratedPool } from '../nodes-harness.js';
import { record } from '../../edge-node/spool/spool-helpers.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call } = await configApp(t, db.url);

const A = { nodeId: 'node-spool-test-0001', nodeName: 'edge-a' };
const base = Date.UTC(2026, 10, 1, 8, 0, 0);

// The longest ids a record may have, in characters of each UTF-8 length and escaped in JSON. The
// schema counts code points: 128 emoji are 256 UTF-16 units and 512 bytes of UTF-8.
const longIds = ['€'.repeat(128), '😀'.repeat(128), '\u0001'.repeat(128), 'é'.repeat(128), 'a'.repeat(128)];
await ingestRecords(pool, A, longIds.map((id, i) => record(id, { receivedAt: base + i, finishedAt: base + i })));

/** A cursor as the API wrote them before the id was encoded as bytes. */
const jsonCursor = (ms: unknown, id: unknown): string => Buffer.from(JSON.stringify([ms, id]), 'utf8').toString('base64url');

t.test('paging one record at a time reaches every record, whatever characters its 128-character id holds', async (t) => {
  const seen: string[] = [];
  let cursor: string | null = null;
  for (let page = 0; page <= longIds.length; page++) {
    const res = await call('GET', `/api/v1/requests?limit=1&from=${base}&to=${base + 1000}${cursor !== null ? `&cursor=${cursor}` : ''}`);
    t.equal(res.statusCode, 200, `page ${page}: ${res.body.slice(0, 200)}`);
    const body = res.json<{ requests: Array<{ requestId: string }>; nextCursor: string | null }>();
    seen.push(...body.requests.map((r) => r.requestId));
    cursor = body.nextCursor;
    if (cursor === null) break;
  }
  t.same(seen, [...longIds].reverse());
});

t.test('the longest cursor the API can issue is exactly the longest the list accepts', async (t) => {
  const longest = encodeCursor({ receivedAtMs: MAX_RECORD_UNIX_MS, requestId: '😀'.repeat(128) });
  t.equal(longest.length, MAX_CURSOR_LENGTH);
  t.equal((await call('GET', `/api/v1/requests?cursor=${longest}`)).statusCode, 200);
  const res = await call('GET', `/api/v1/requests?cursor=${longest}0`);
  t.equal(res.statusCode, 400);
  t.match(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: /cursor/ } });
});

t.test('a cursor naming a position no record can have is a 400 naming the cursor, never a query', async (t) => {
  const tampered = {
    'NUL in the id': encodeCursor({ receivedAtMs: base, requestId: 'a\u0000b' }),
    'NUL in the id, as cursors were written before': jsonCursor(base, 'a\u0000b'),
    'an unpaired surrogate in the id, as cursors were written before': jsonCursor(base, 'a\ud800b'),
    'a time past the last a record may carry': encodeCursor({ receivedAtMs: MAX_RECORD_UNIX_MS + 1, requestId: 'a' }),
    'a time past the last a record may carry, as cursors were written before': jsonCursor(Number.MAX_SAFE_INTEGER, 'a'),
    'a negative time, as cursors were written before': jsonCursor(-1, 'a'),
    'an id over 128 characters': encodeCursor({ receivedAtMs: base, requestId: 'a'.repeat(129) }),
    'an id over 128 characters, some of them emoji': encodeCursor({ receivedAtMs: base, requestId: `${'😀'.repeat(100)}${'a'.repeat(29)}` }),
    'an empty id, as cursors were written before': jsonCursor(base, ''),
    'bytes that are not UTF-8': `${base}.${Buffer.from([0x61, 0xff]).toString('base64url')}`,
    'a time with a leading zero': `0${encodeCursor({ receivedAtMs: base, requestId: 'a' })}`,
    'base64 with a stray character': `${encodeCursor({ receivedAtMs: base, requestId: 'ab' })}=`,
  };
  for (const [what, cursor] of Object.entries(tampered)) {
    const res = await call('GET', `/api/v1/requests?cursor=${encodeURIComponent(cursor)}`);
    t.equal(res.statusCode, 400, `${what}: ${res.body.slice(0, 200)}`);
    t.match(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message: 'cursor: not a cursor this API returned' } }, what);
  }
});

t.test('a cursor issued before the id was encoded as bytes still pages on', async (t) => {
  const res = await call('GET', `/api/v1/requests?limit=10&from=${base}&cursor=${jsonCursor(base + 3, 'é'.repeat(128))}`);
  t.equal(res.statusCode, 200, res.body.slice(0, 200));
  t.same(res.json<{ requests: Array<{ requestId: string }> }>().requests.map((r) => r.requestId), ['\u0001'.repeat(128), '😀'.repeat(128), '€'.repeat(128)]);
});
