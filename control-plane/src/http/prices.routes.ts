/** The prices admin API (inside the /api/v1 admin scope): set, list, show, delete a model alias's price. */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { nameParam, parseConfigInput, refuseBodyFields } from '../config/config-fields.js';
import { zenovaError } from '../errors.js';
import { deletePrice, getPrice, listPrices, setPrice } from '../prices/price-store.js';
import { pricePutSchema } from '../prices/price-validation.js';
import { priceEtag, priceViewSchema, toPriceView } from '../prices/price-view.js';
import { readIfMatch } from './if-match.js';
import { noQuerySchema } from './zod-schemas.js';
import type { ZodTypeProvider } from './zod-schemas.js';

const modelParams = z.object({ model: nameParam() });

export const pricesRoutes: FastifyPluginAsync<{ pool: pg.Pool }> = async (fastify, { pool }) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  // Fail closed if this plugin is ever mounted outside the admin scope.
  app.addHook('preHandler', async (request) => {
    if (!request.principal) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED');
  });

  app.put('/prices/:model', {
    schema: { params: modelParams, response: { 200: z.object({ price: priceViewSchema, configVersion: z.number() }) } },
  }, async (request, reply) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    const input = parseConfigInput(pricePutSchema, request.body);
    const { value, configVersion } = await setPrice(pool, request.params.model, input, ifMatch);
    request.log.info({ model: value.model, configVersion }, 'price set');
    void reply.header('etag', priceEtag(value));
    return { price: toPriceView(value), configVersion };
  });

  app.get('/prices/:model', {
    schema: { params: modelParams, response: { 200: priceViewSchema } },
  }, async (request, reply) => {
    const price = await getPrice(pool, request.params.model);
    void reply.header('etag', priceEtag(price));
    return toPriceView(price);
  });

  app.get('/prices', {
    schema: { querystring: noQuerySchema, response: { 200: z.object({ prices: z.array(priceViewSchema) }) } },
  }, async () => ({ prices: (await listPrices(pool)).map(toPriceView) }));

  app.delete('/prices/:model', {
    schema: { params: modelParams, response: { 200: z.object({ deleted: z.string(), configVersion: z.number() }) } },
  }, async (request) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    refuseBodyFields(request.body);
    const { value, configVersion } = await deletePrice(pool, request.params.model, ifMatch);
    request.log.info({ model: value.model, configVersion }, 'price deleted');
    return { deleted: value.model, configVersion };
  });
};
