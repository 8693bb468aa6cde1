/**
 * The tool servers admin API (MCP servers callers reach at /mcp/{name} on nodes), inside the
 * /api/v1 admin scope: put, list, show, delete. The server's key goes in, sealed, and never comes
 * out: the view only says `hasApiKey`, logs name fields explicitly (never the body), and validation
 * messages never quote a value.
 */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { nameParam, parseConfigInput, refuseBodyFields } from '../config/config-fields.js';
import type { SecretBox } from '../crypto/secret-box.js';
import { zenovaError } from '../errors.js';
import { deleteToolServer, getToolServer, listToolServers, putToolServer } from '../tools/tool-server-store.js';
import { TOOL_SERVER_NAME_PATTERN, TOOL_SERVER_NAME_RULE, toolServerPutSchema } from '../tools/tool-server-validation.js';
import { toToolServerView, toolServerEtag, toolServerViewSchema } from '../tools/tool-server-view.js';
import { readIfMatch } from './if-match.js';
import { noQuerySchema } from './zod-schemas.js';
import type { ZodTypeProvider } from './zod-schemas.js';

const nameParams = z.object({ name: nameParam(TOOL_SERVER_NAME_PATTERN, TOOL_SERVER_NAME_RULE) });
const mutationReply = z.object({ toolServer: toolServerViewSchema, configVersion: z.number() });

export const toolServersRoutes: FastifyPluginAsync<{ pool: pg.Pool; secretBox: SecretBox | undefined }> = async (fastify, { pool, secretBox }) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  // Fail closed if this plugin is ever mounted outside the admin scope.
  app.addHook('preHandler', async (request) => {
    if (!request.principal) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED');
  });

  app.put('/tool-servers/:name', {
    schema: { params: nameParams, response: { 200: mutationReply, 201: mutationReply } },
  }, async (request, reply) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    const input = parseConfigInput(toolServerPutSchema, request.body);
    const { value, configVersion } = await putToolServer(pool, secretBox, request.params.name, input, ifMatch);
    const { row, created } = value;
    request.log.info(
      { toolServer: row.name, toolServerId: row.id, hasApiKey: row.hasApiKey, configVersion },
      created ? 'tool server created' : 'tool server replaced',
    );
    void reply.header('etag', toolServerEtag(row));
    return reply.status(created ? 201 : 200).send({ toolServer: toToolServerView(row), configVersion });
  });

  app.get('/tool-servers', {
    schema: { querystring: noQuerySchema, response: { 200: z.object({ toolServers: z.array(toolServerViewSchema) }) } },
  }, async () => ({ toolServers: (await listToolServers(pool)).map(toToolServerView) }));

  app.get('/tool-servers/:name', {
    schema: { params: nameParams, response: { 200: toolServerViewSchema } },
  }, async (request, reply) => {
    const toolServer = await getToolServer(pool, request.params.name);
    void reply.header('etag', toolServerEtag(toolServer));
    return toToolServerView(toolServer);
  });

  app.delete('/tool-servers/:name', {
    schema: { params: nameParams, response: { 200: z.object({ deleted: z.string(), configVersion: z.number() }) } },
  }, async (request) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    refuseBodyFields(request.body);
    const { value, configVersion } = await deleteToolServer(pool, request.params.name, ifMatch);
    request.log.info({ toolServer: value.name, toolServerId: value.id, configVersion }, 'tool server deleted');
    return { deleted: value.name, configVersion };
  });
};
