/**
 * The price body: integer micro-units per input token, per output token and per request. Money is
 * never a float: 1.5 and "15" are refused, not rounded or coerced.
 */
import type { z } from 'zod';
import { bodyObject, integerIn } from '../config/config-fields.js';

const micros = (): z.ZodNumber => integerIn(0, Number.MAX_SAFE_INTEGER);

export const pricePutSchema = bodyObject({
  inputMicrosPerToken: micros(),
  outputMicrosPerToken: micros(),
  requestMicros: micros().default(0),
});

export type PriceInput = z.output<typeof pricePutSchema>;
