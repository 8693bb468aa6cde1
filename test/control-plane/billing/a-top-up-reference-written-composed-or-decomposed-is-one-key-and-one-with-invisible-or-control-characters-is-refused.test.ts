/**
 * A top-up's `reference` is its safe-retry key: one written with an accent composed (`Café-1`) and
 * then decomposed (`Cafe\u0301-1`) is one key, stored in NFC, so the retry credits nothing more; one
 * holding an invisible character (a zero width space, a soft hyphen, a BOM inside: default-ignorable
 * code points) or a control character (`inv\r\n7`) is refused 400 naming the field, since it would
 * look like another reference and credit again. Real PostgreSQL.
 */
import t from 'tap';
import { testDatabase } from '../../fixtures/postgres.js';
import { configApp } from '../config-harness.js';
import { migratedPool } from '../nodes-harness.js';
import { creditAccount } from '../../../control-plane/src/billing/account-credits.js';
import { insertAccount, storedBalance } from './billing-fixtures.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call } = await configApp(t, db.url);

/** A reference as a test name may hold it: TAP's output is line-based, so no raw control or invisible characters. */
const shown = (reference: string): string => reference.replace(/[^\x20-\x7e]/gu, (c) => `\\u{${c.codePointAt(0)!.toString(16).toUpperCase()}}`);

interface TopUpReply { replayed: boolean; balance: { balanceMicros: number } }

async function creditReferences(accountId: string): Promise<string[]> {
  const { rows } = await pool.query<{ reference: string }>(
    `select reference from billing_ledger where account_id = $1 and kind = 'credit' order by reference`,
    [accountId],
  );
  return rows.map((r) => r.reference);
}

t.test('a reference sent composed, then decomposed, is one top-up replayed, stored in NFC', async (t) => {
  const accountId = await insertAccount(pool, 'nfc-acme');
  const composed = await call('POST', '/api/v1/accounts/nfc-acme/credits', { amountMicros: 1_000, reference: 'Caf\u00E9-1' });
  t.equal(composed.statusCode, 201, composed.body);
  const decomposed = await call('POST', '/api/v1/accounts/nfc-acme/credits', { amountMicros: 1_000, reference: 'Cafe\u0301-1' });
  t.equal(decomposed.statusCode, 200, decomposed.body);
  t.match(decomposed.json<TopUpReply>(), { replayed: true, balance: { balanceMicros: 1_000 } });
  // And the other way round, on a fresh reference.
  t.equal((await call('POST', '/api/v1/accounts/nfc-acme/credits', { amountMicros: 7, reference: 'Sa\u0303o-2' })).statusCode, 201);
  const again = await call('POST', '/api/v1/accounts/nfc-acme/credits', { amountMicros: 7, reference: 'S\u00E3o-2' });
  t.equal(again.statusCode, 200, again.body);
  t.same(await creditReferences(accountId), ['Caf\u00E9-1', 'S\u00E3o-2'], 'two credit rows, each reference in NFC');
  t.equal((await storedBalance(pool, accountId)).balance, 1_007n, 'credited once each');
  // Another amount under the decomposed form is the composed one's conflict, as for any reference.
  t.equal((await call('POST', '/api/v1/accounts/nfc-acme/credits', { amountMicros: 2_000, reference: 'Cafe\u0301-1' })).statusCode, 409);
});

t.test('a reference holding an invisible or a control character is refused 400 naming the field; nothing is credited', async (t) => {
  const accountId = await insertAccount(pool, 'invisible-acme');
  t.equal((await call('POST', '/api/v1/accounts/invisible-acme/credits', { amountMicros: 1_000, reference: 'inv' })).statusCode, 201);
  const cases: Array<[reference: string, message: RegExp]> = [
    ['inv\u200B', /^reference: must not hold invisible characters/],
    ['\u200Binv', /^reference: must not hold invisible characters/],
    ['in\u00ADv', /^reference: must not hold invisible characters/],
    ['in\u2060v', /^reference: must not hold invisible characters/],
    ['inv\uFE0F', /^reference: must not hold invisible characters/],
    ['in\u200Dv', /^reference: must not hold invisible characters/],
    ['inv\r\n7', /^reference: must not hold control characters/],
    ['inv\u00007', /^reference: /],
    ['inv\t7', /^reference: must not hold control characters/],
    ['inv\u007F', /^reference: must not hold control characters/],
    ['inv\u00857', /^reference: must not hold control characters/],
  ];
  for (const [reference, message] of cases) {
    const res = await call('POST', '/api/v1/accounts/invisible-acme/credits', { amountMicros: 1_000, reference });
    t.equal(res.statusCode, 400, `${shown(reference)}: ${shown(res.body)}`);
    t.match(res.json(), { error: { code: 'ZN_ERR_CP_INVALID_REQUEST', message } }, shown(reference));
  }
  t.same(await creditReferences(accountId), ['inv'], 'only the first top-up credited');
  t.equal((await storedBalance(pool, accountId)).balance, 1_000n);
  t.equal((await call('POST', '/api/v1/accounts/invisible-acme/credits', { amountMicros: 1, reference: 'INV 7 / Café' })).statusCode, 201, 'inner spaces and letters are fine');
});

t.test('a top-up stored before the rule, as its client sent it (decomposed, or with an invisible character), still replays when that client retries the same bytes', async (t) => {
  const accountId = await insertAccount(pool, 'legacy-acme');
  // As a control plane before the rule stored them (or a replica of it during a rolling upgrade): exactly as sent.
  await creditAccount(pool, accountId, 1_000n, 'Cafe\u0301-9');
  await creditAccount(pool, accountId, 500n, 'inv\u200B9');
  const decomposed = await call('POST', '/api/v1/accounts/legacy-acme/credits', { amountMicros: 1_000, reference: 'Cafe\u0301-9' });
  t.equal(decomposed.statusCode, 200, decomposed.body);
  t.match(decomposed.json<TopUpReply>(), { replayed: true }, 'the decomposed retry replays the row stored decomposed');
  const composed = await call('POST', '/api/v1/accounts/legacy-acme/credits', { amountMicros: 1_000, reference: 'Caf\u00E9-9' });
  t.equal(composed.statusCode, 201, 'the composed form was never that client\'s key: a new top-up');
  const invisible = await call('POST', '/api/v1/accounts/legacy-acme/credits', { amountMicros: 500, reference: 'inv\u200B9' });
  t.equal(invisible.statusCode, 200, `a stored reference with an invisible character replays, not refused: ${shown(invisible.body)}`);
  const otherAmount = await call('POST', '/api/v1/accounts/legacy-acme/credits', { amountMicros: 7, reference: 'inv\u200B9' });
  t.equal(otherAmount.statusCode, 409, 'and another amount under it is the used reference, as for any');
  const fresh = await call('POST', '/api/v1/accounts/legacy-acme/credits', { amountMicros: 500, reference: 'inv\u200B10' });
  t.equal(fresh.statusCode, 400, 'a new one with an invisible character is still refused');
  t.equal((await storedBalance(pool, accountId)).balance, 2_500n, 'credited: the two stored top-ups and the composed one, nothing twice');
});
