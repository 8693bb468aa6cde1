/**
 * Prices per model alias in PostgreSQL: set (insert or replace), list, delete. A price may be set
 * before its route exists. Every write that changes something records a config version in its
 * transaction; setting the price a model already has records none, even when a concurrent PUT
 * created it a moment before.
 */
import type pg from 'pg';
import { DOT_SEGMENT_NAME_RULE, invalidField, isDotSegmentName } from '../config/config-fields.js';
import { withConfigChange } from '../config/config-store.js';
import type { ConfigMutationResult } from '../config/config-store.js';
import { zenovaError } from '../errors.js';
import { checkIfMatch } from '../http/if-match.js';
import type { IfMatch } from '../http/if-match.js';
import type { Queryable } from '../nodes/with-transaction.js';
import type { PriceInput } from './price-validation.js';
import { priceEtag } from './price-view.js';
import type { PriceRow } from './price-view.js';

const COLUMNS = `model, input_micros_per_token::text as "inputMicrosPerToken", output_micros_per_token::text as "outputMicrosPerToken",
  request_micros::text as "requestMicros", updated_at as "updatedAt"`;

function notFound(model: string): Error {
  return zenovaError('ZN_ERR_CP_PRICE_NOT_FOUND', `No price for model '${model}'.`);
}

/** The row holds the figures as text (bigint); input figures are safe integers, so their decimal forms compare. */
function samePrice(current: PriceRow, input: PriceInput): boolean {
  return current.inputMicrosPerToken === String(input.inputMicrosPerToken)
    && current.outputMicrosPerToken === String(input.outputMicrosPerToken)
    && current.requestMicros === String(input.requestMicros);
}

/** The price set for `model`. */
export async function getPrice(db: Queryable, model: string): Promise<PriceRow> {
  const { rows } = await db.query<PriceRow>(`select ${COLUMNS} from prices where model = $1`, [model]);
  if (!rows[0]) throw notFound(model);
  return rows[0];
}

export async function setPrice(pool: pg.Pool, model: string, input: PriceInput, ifMatch?: IfMatch): Promise<ConfigMutationResult<PriceRow>> {
  return withConfigChange(pool, async (client) => {
    const { rows: found } = await client.query<PriceRow>(`select ${COLUMNS} from prices where model = $1 for update`, [model]);
    const current = found[0];
    // Under the row lock until commit: a writer holding the same ETag waits here and is refused.
    // No row: a PUT that would create, which no If-Match matches — and since it then never inserts,
    // the insert below (which a concurrent create may race) is only ever reached without one.
    checkIfMatch(ifMatch, current === undefined ? undefined : priceEtag(current));
    // A PUT creates, and no new price may take such a name; one set before this rule may still change.
    if (current === undefined && isDotSegmentName(model)) throw invalidField('model', DOT_SEGMENT_NAME_RULE);
    // The same price again: nothing a node serves changes (nor updatedAt).
    if (current !== undefined && samePrice(current, input)) return { value: current, change: null };
    // No row to lock when the price is new: a concurrent PUT may be inserting it now. The insert
    // then waits for that transaction; once it has committed, the conflict arm sees its row, and
    // writes (and returns) it only if the figures differ. Comparing in the statement, not before
    // it, keeps the lock order of every writer (row first, config-change lock last).
    const { rows } = await client.query<PriceRow>(
      `insert into prices as p (model, input_micros_per_token, output_micros_per_token, request_micros)
       values ($1, $2, $3, $4)
       on conflict (model) do update set input_micros_per_token = excluded.input_micros_per_token,
                                         output_micros_per_token = excluded.output_micros_per_token,
                                         request_micros = excluded.request_micros,
                                         updated_at = now()
         where (p.input_micros_per_token, p.output_micros_per_token, p.request_micros)
               is distinct from (excluded.input_micros_per_token, excluded.output_micros_per_token, excluded.request_micros)
       returning ${COLUMNS}`,
      [model, input.inputMicrosPerToken, input.outputMicrosPerToken, input.requestMicros],
    );
    if (rows[0] !== undefined) return { value: rows[0], change: { entity: 'price', entityId: model, action: 'update' } };
    // The concurrent PUT set this very price (the conflict arm locked its row): nothing changes.
    const { rows: same } = await client.query<PriceRow>(`select ${COLUMNS} from prices where model = $1`, [model]);
    return { value: same[0]!, change: null };
  });
}

export async function listPrices(db: Queryable): Promise<PriceRow[]> {
  const { rows } = await db.query<PriceRow>(`select ${COLUMNS} from prices order by model`);
  return rows;
}

export async function deletePrice(pool: pg.Pool, model: string, ifMatch?: IfMatch): Promise<ConfigMutationResult<PriceRow>> {
  return withConfigChange(pool, async (client) => {
    const { rows } = await client.query<PriceRow>(`select ${COLUMNS} from prices where model = $1 for update`, [model]);
    const current = rows[0];
    if (!current) throw notFound(model);
    // Under the row lock until commit: an edit or delete holding the same ETag waits here and is refused.
    checkIfMatch(ifMatch, priceEtag(current));
    await client.query('delete from prices where model = $1', [model]);
    return { value: current, change: { entity: 'price', entityId: model, action: 'delete' } };
  });
}
