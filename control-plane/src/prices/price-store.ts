/**
 * Prices per model alias in PostgreSQL: set (insert or replace), list, delete. A price may be set
 * before its route exists. Every write records a config version in its transaction.
 */
import type pg from 'pg';
import { DOT_SEGMENT_NAME_RULE, invalidField, isDotSegmentName } from '../config/config-fields.js';
import { withConfigChange } from '../config/config-store.js';
import type { ConfigMutationResult } from '../config/config-store.js';
import { zenovaError } from '../errors.js';
import type { Queryable } from '../nodes/with-transaction.js';
import type { PriceInput } from './price-validation.js';
import type { PriceRow } from './price-view.js';

const COLUMNS = `model, input_micros_per_token::text as "inputMicrosPerToken", output_micros_per_token::text as "outputMicrosPerToken",
  request_micros::text as "requestMicros", updated_at as "updatedAt"`;

export async function setPrice(pool: pg.Pool, model: string, input: PriceInput): Promise<ConfigMutationResult<PriceRow>> {
  return withConfigChange(pool, async (client) => {
    if (isDotSegmentName(model)) {
      // A PUT creates, and no new price may take such a name; one set before this rule may still change.
      const existing = await client.query('select 1 from prices where model = $1 for update', [model]);
      if (existing.rowCount === 0) throw invalidField('model', DOT_SEGMENT_NAME_RULE);
    }
    const { rows } = await client.query<PriceRow>(
      `insert into prices (model, input_micros_per_token, output_micros_per_token, request_micros)
       values ($1, $2, $3, $4)
       on conflict (model) do update set input_micros_per_token = excluded.input_micros_per_token,
                                         output_micros_per_token = excluded.output_micros_per_token,
                                         request_micros = excluded.request_micros,
                                         updated_at = now()
       returning ${COLUMNS}`,
      [model, input.inputMicrosPerToken, input.outputMicrosPerToken, input.requestMicros],
    );
    return { value: rows[0]!, change: { entity: 'price', entityId: model, action: 'update' } };
  });
}

export async function listPrices(db: Queryable): Promise<PriceRow[]> {
  const { rows } = await db.query<PriceRow>(`select ${COLUMNS} from prices order by model`);
  return rows;
}

export async function deletePrice(pool: pg.Pool, model: string): Promise<ConfigMutationResult<PriceRow>> {
  return withConfigChange(pool, async (client) => {
    const { rows } = await client.query<PriceRow>(`delete from prices where model = $1 returning ${COLUMNS}`, [model]);
    if (!rows[0]) throw zenovaError('ZN_ERR_CP_PRICE_NOT_FOUND', `No price for model '${model}'.`);
    return { value: rows[0], change: { entity: 'price', entityId: model, action: 'delete' } };
  });
}
