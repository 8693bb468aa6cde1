/**
 * The nodes admin API (registered inside the /api/v1 admin scope): create, list, show, edit
 * network, edit settings (surfaces, spool), delete, and issue install / reenroll / upgrade
 * commands. Wizard fields are validated by nodes/node-validation.ts so every rejection reads
 * `field: rule`.
 */
import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { nameParam, refuseBodyFields } from '../config/config-fields.js';
import { zenovaError } from '../errors.js';
import { createNode, deleteNode, editNodeNetwork, editNodeSettings, getNode, issueCommand, nodeSettingsPatchSchema } from '../nodes/node-admin.js';
import type { IssuedCommand } from '../nodes/node-admin.js';
import { listLiveNodes } from '../nodes/node-repository.js';
import { NODE_NAME_PATTERN, NODE_NAME_RULE, nodeCreateSchema, nodeNetworkPatchSchema, parseNodeInput } from '../nodes/node-validation.js';
import { nodeEtag, nodeViewSchema, toNodeView } from '../nodes/node-view.js';
import type { InstallTokenKind } from '../nodes/install-tokens.js';
import type { Settings } from '../settings.js';
import { readIfMatch } from './if-match.js';
import { noQuerySchema } from './zod-schemas.js';
import type { ZodTypeProvider } from './zod-schemas.js';

/** Room for a CA bundle (64 KiB of PEM) and the other fields. */
export const NODE_BODY_LIMIT_BYTES = 128 * 1024;
/** The command routes take no body; the CLI sends `{}`. Anything bigger is not meant for them. */
export const COMMAND_BODY_LIMIT_BYTES = 1024;

const nameParams = z.object({ name: nameParam(NODE_NAME_PATTERN, NODE_NAME_RULE) });

const commandSchema = z.object({
  kind: z.enum(['install', 'reenroll', 'upgrade']),
  command: z.string(),
  checkCommand: z.string(),
  token: z.string(),
  expiresAt: z.string(),
  caPem: z.string().nullable(),
});

const toCommandBody = (issued: IssuedCommand): z.input<typeof commandSchema> => ({
  kind: issued.kind,
  command: issued.command,
  checkCommand: issued.checkCommand,
  token: issued.token,
  expiresAt: issued.expiresAt.toISOString(),
  caPem: issued.caPem,
});

const COMMAND_ROUTES: ReadonlyArray<[string, InstallTokenKind]> = [
  ['install-command', 'install'],
  ['reenroll-command', 'reenroll'],
  ['upgrade-command', 'upgrade'],
];

export const nodesRoutes: FastifyPluginAsync<{ pool: pg.Pool; settings: Settings }> = async (fastify, { pool, settings }) => {
  const app = fastify.withTypeProvider<ZodTypeProvider>();
  const view = (row: Parameters<typeof toNodeView>[0]): z.input<typeof nodeViewSchema> =>
    toNodeView(row, { offlineAfterMs: settings.nodes.offlineAfterMs });

  // Fail closed if this plugin is ever mounted outside the admin scope.
  app.addHook('preHandler', async (request) => {
    if (!request.principal) throw zenovaError('ZN_ERR_CP_UNAUTHENTICATED');
  });

  app.post('/nodes', {
    bodyLimit: NODE_BODY_LIMIT_BYTES,
    schema: { response: { 201: z.object({ node: nodeViewSchema, install: commandSchema }) } },
  }, async (request, reply) => {
    const input = parseNodeInput(nodeCreateSchema, request.body);
    const created = await createNode(pool, input, settings.nodes.installTokenTtlMs);
    request.log.info({ node: created.node.name, nodeId: created.node.id }, 'node created');
    return reply.status(201).send({ node: view(created.node), install: toCommandBody(created.install) });
  });

  app.get('/nodes', {
    schema: { querystring: noQuerySchema, response: { 200: z.object({ nodes: z.array(nodeViewSchema) }) } },
  }, async () => ({ nodes: (await listLiveNodes(pool)).map(view) }));

  app.get('/nodes/:name', {
    schema: { params: nameParams, response: { 200: nodeViewSchema } },
  }, async (request, reply) => {
    const node = await getNode(pool, request.params.name);
    void reply.header('etag', nodeEtag(node));
    return view(node);
  });

  app.patch('/nodes/:name/network', {
    bodyLimit: NODE_BODY_LIMIT_BYTES,
    schema: { params: nameParams, response: { 200: nodeViewSchema } },
  }, async (request, reply) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    const patch = parseNodeInput(nodeNetworkPatchSchema, request.body);
    const node = await editNodeNetwork(pool, request.params.name, patch, ifMatch);
    request.log.info({ node: node.name, fields: Object.keys(patch) }, 'node network edited');
    void reply.header('etag', nodeEtag(node));
    return view(node);
  });

  app.patch('/nodes/:name/settings', {
    bodyLimit: NODE_BODY_LIMIT_BYTES,
    schema: { params: nameParams, response: { 200: nodeViewSchema } },
  }, async (request, reply) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    const patch = parseNodeInput(nodeSettingsPatchSchema, request.body);
    const node = await editNodeSettings(pool, request.params.name, patch, ifMatch);
    request.log.info({ node: node.name, fields: Object.keys(patch) }, 'node settings edited');
    void reply.header('etag', nodeEtag(node));
    return view(node);
  });

  app.delete('/nodes/:name', {
    bodyLimit: NODE_BODY_LIMIT_BYTES,
    schema: { params: nameParams, response: { 200: z.object({ deleted: z.string() }) } },
  }, async (request) => {
    const ifMatch = readIfMatch(request.headers, request.method);
    refuseBodyFields(request.body);
    const node = await deleteNode(pool, request.params.name, ifMatch);
    request.log.info({ node: node.name, nodeId: node.id }, 'node deleted; its credentials are revoked');
    return { deleted: node.name };
  });

  for (const [path, kind] of COMMAND_ROUTES) {
    app.post(`/nodes/:name/${path}`, {
      bodyLimit: COMMAND_BODY_LIMIT_BYTES,
      schema: { params: nameParams, response: { 200: commandSchema } },
    }, async (request) => {
      refuseBodyFields(request.body);
      const issued = await issueCommand(pool, request.params.name, kind, settings.nodes.installTokenTtlMs);
      request.log.info({ node: request.params.name, kind }, 'node command issued');
      return toCommandBody(issued);
    });
  }
};
