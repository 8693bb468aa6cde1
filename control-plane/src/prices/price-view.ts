/** What the admin API shows of a price; the zod schema is the response schema. */
import { z } from 'zod';
import { etagOf } from '../http/if-match.js';

export const priceViewSchema = z.object({
  model: z.string(),
  inputMicrosPerToken: z.number(),
  outputMicrosPerToken: z.number(),
  requestMicros: z.number(),
  updatedAt: z.string(),
});

export type PriceView = z.infer<typeof priceViewSchema>;

export interface PriceRow {
  model: string;
  /** bigints, as pg returns them. */
  inputMicrosPerToken: string;
  outputMicrosPerToken: string;
  requestMicros: string;
  updatedAt: Date;
}

export function toPriceView(row: PriceRow): PriceView {
  return {
    model: row.model,
    inputMicrosPerToken: Number(row.inputMicrosPerToken),
    outputMicrosPerToken: Number(row.outputMicrosPerToken),
    requestMicros: Number(row.requestMicros),
    updatedAt: row.updatedAt.toISOString(),
  };
}

/** The price's ETag (http/if-match.ts): a hash of its view, which is all it stores. */
export function priceEtag(row: PriceRow): string {
  return etagOf({ price: toPriceView(row) });
}
