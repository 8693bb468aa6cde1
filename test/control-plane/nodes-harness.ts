// Shared set-up for the nodes, enrollment and credentials tests: a migrated database, an app with
// a stub enrollment dependency, and helpers to create nodes and enroll them through the real API.
import { generateKeyPairSync } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import pg from 'pg';
import { buildApp } from '../../control-plane/src/app.js';
import { migrate } from '../../control-plane/src/db/migrate.js';
import { createPool } from '../../control-plane/src/db/pool.js';
import type { EnrollmentDeps } from '../../control-plane/src/nodes/enrollment.js';
import type { NodeSettings, Settings } from '../../control-plane/src/settings.js';
import { PROTOCOL_VERSION } from '../../proto/src/protocol-version.js';
import { createTestCa } from '../fixtures/tls.js';
import { runEach } from '../fixtures/teardown-steps.js';
import { ADMIN_TOKEN, boundedPoolEnd, captureLogger, testSettings } from './helpers.js';
import type { CapturedLogger } from './helpers.js';

interface HasTeardown { teardown(fn: () => unknown): void }

export const bearer = { authorization: `Bearer ${ADMIN_TOKEN}` };

/**
 * What the stub enrollment dependency hands out; the tests check it arrives unchanged. Real PEMs:
 * the control plane refuses to hand out an answer the node could not parse.
 */
export const STUB_GATEWAY = {
  target: 'gateway.zenova.test:8443',
  serverName: 'gateway.zenova.test',
  caPem: (await createTestCa('Zenova Stub Gateway CA')).certPem,
} as const;
export const STUB_SIGNING_KEY_PEM = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();

export const stubEnrollment: EnrollmentDeps = {
  gatewayInfo: async () => ({ ...STUB_GATEWAY }),
  configSigningPublicKeyPem: async () => STUB_SIGNING_KEY_PEM,
};

export async function migratedPool(t: HasTeardown, url: string): Promise<pg.Pool> {
  const pool = createPool({ databaseUrl: url });
  t.teardown(boundedPoolEnd(pool));
  await migrate(pool);
  return pool;
}

export interface NodesApp { app: FastifyInstance; pool: pg.Pool; settings: Settings; log: CapturedLogger }

/** An app on its own pool; `nodes` overrides node settings, `enrollment: null` leaves it out. */
export async function nodesApp(
  t: HasTeardown,
  url: string,
  opts: { nodes?: Partial<NodeSettings>; enrollment?: EnrollmentDeps | null; trustedProxies?: string[] } = {},
): Promise<NodesApp> {
  const base = testSettings(url);
  const settings: Settings = { ...base, nodes: { ...base.nodes, ...opts.nodes }, trustedProxies: opts.trustedProxies ?? base.trustedProxies };
  const log = captureLogger(settings);
  const pool = createPool({ databaseUrl: url, logger: log.logger });
  const endPool = boundedPoolEnd(pool);
  const app = await buildApp({
    settings,
    pool,
    logger: log.logger,
    ...(opts.enrollment === null ? {} : { enrollment: opts.enrollment ?? stubEnrollment }),
  });
  t.teardown(() => runEach('the nodes app', () => app.close(), endPool));
  return { app, pool, settings, log };
}

let nameCounter = 0;
/** A node name no other test in this process used. */
export function uniqueName(prefix = 'edge'): string {
  nameCounter += 1;
  return `${prefix}-${process.pid % 1000}-${nameCounter}`;
}

export function validNodeBody(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    name: uniqueName(),
    surfaces: ['model'],
    address: 'edge.example.com',
    controlPlaneUrl: 'https://cp.example.com',
    ...overrides,
  };
}

export interface CreatedNode {
  node: { id: string; name: string; [key: string]: unknown };
  install: { command: string; token: string; expiresAt: string; kind: string; caPem: string | null };
}

export async function createNode(app: FastifyInstance, overrides: Record<string, unknown> = {}): Promise<CreatedNode> {
  const res = await app.inject({ method: 'POST', url: '/api/v1/nodes', headers: bearer, payload: validNodeBody(overrides) });
  if (res.statusCode !== 201) throw new Error(`creating a node failed: ${res.statusCode} ${res.body}`);
  return res.json<CreatedNode>();
}

export async function issue(app: FastifyInstance, name: string, kind: 'install' | 'reenroll' | 'upgrade'): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: `/api/v1/nodes/${name}/${kind}-command`, headers: bearer });
}

export const FACTS = { hostname: 'edge-host-1', arch: 'x86_64', version: '0.1.0', protocolVersion: PROTOCOL_VERSION } as const;

export async function enroll(
  app: FastifyInstance,
  token: string,
  opts: { mode?: 'install' | 'reenroll'; facts?: Record<string, unknown>; remoteAddress?: string; forwardedFor?: string } = {},
): Promise<LightMyRequestResponse> {
  return app.inject({
    method: 'POST',
    url: '/api/enroll',
    payload: { token, mode: opts.mode ?? 'install', facts: opts.facts ?? FACTS },
    ...(opts.remoteAddress ? { remoteAddress: opts.remoteAddress } : {}),
    ...(opts.forwardedFor ? { headers: { 'x-forwarded-for': opts.forwardedFor } } : {}),
  });
}

/** A dedicated LISTEN connection collecting zenova_node_events payloads. */
export async function listenNodeEvents(t: HasTeardown, url: string): Promise<{ events: Array<{ type: string; nodeId: string }> }> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  t.teardown(() => client.end());
  const events: Array<{ type: string; nodeId: string }> = [];
  client.on('notification', (msg) => {
    if (msg.channel === 'zenova_node_events' && msg.payload) events.push(JSON.parse(msg.payload) as { type: string; nodeId: string });
  });
  await client.query('listen zenova_node_events');
  return { events };
}
