/**
 * A node's online/offline status is judged against the database's clock, the one that stamps its
 * heartbeats (last_heartbeat_at = now()), not against the control-plane process's clock: a control
 * plane whose clock is far off from its database's (another host, a clock step) must not show
 * heartbeating nodes offline, nor dead ones online. Real PostgreSQL; the process clock is moved by
 * replacing the global Date while the API answers.
 */
import t from 'tap';
import { recordHeartbeat } from '../../control-plane/src/gateway/node-status.js';
import { testDatabase } from '../fixtures/postgres.js';
import { bearer, createNode, migratedPool, nodesApp } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const OFFLINE_AFTER_MS = 120_000;
const { app } = await nodesApp(t, db.url, { nodes: { offlineAfterMs: OFFLINE_AFTER_MS } });

const RealDate = Date;

/** Runs `fn` with this process's clock `offsetMs` off (the database's is left alone). */
async function withProcessClockOff<T>(offsetMs: number, fn: () => Promise<T>): Promise<T> {
  class SkewedDate extends RealDate {
    constructor(...args: unknown[]) {
      if (args.length === 0) super(RealDate.now() + offsetMs);
      else super(...(args as [string]));
    }

    static override now(): number {
      return RealDate.now() + offsetMs;
    }
  }
  globalThis.Date = SkewedDate as DateConstructor;
  try {
    return await fn();
  } finally {
    globalThis.Date = RealDate;
  }
}

interface View { name: string; status: string; clockSkewMs: number | null }

async function statusesOf(name: string): Promise<{ single: string; listed: string | undefined }> {
  const single = (await app.inject({ method: 'GET', url: `/api/v1/nodes/${name}`, headers: bearer })).json<View>();
  const list = (await app.inject({ method: 'GET', url: '/api/v1/nodes', headers: bearer })).json<{ nodes?: View[] } | View[]>();
  const nodes = Array.isArray(list) ? list : (list.nodes ?? []);
  return { single: single.status, listed: nodes.find((n) => n.name === name)?.status };
}

t.test('a node with a fresh heartbeat is online while the control plane\'s clock is 10 minutes ahead of the database\'s', async (t) => {
  const { node } = await createNode(app);
  await pool.query('update nodes set last_heartbeat_at = now() where id = $1', [node.id]);
  t.same(await withProcessClockOff(10 * 60_000, () => statusesOf(node.name)), { single: 'online', listed: 'online' });
});

t.test('a node whose last heartbeat is past the offline bound is offline while the control plane\'s clock is 10 minutes behind the database\'s', async (t) => {
  const { node } = await createNode(app);
  await pool.query('update nodes set last_heartbeat_at = now() - make_interval(secs => $2) where id = $1', [node.id, OFFLINE_AFTER_MS / 1000 + 5]);
  t.same(await withProcessClockOff(-10 * 60_000, () => statusesOf(node.name)), { single: 'offline', listed: 'offline' });
});

t.test('the node view shows the clock skew its last heartbeat measured, and null before any', async (t) => {
  const { node } = await createNode(app);
  const view = async (): Promise<View> => (await app.inject({ method: 'GET', url: `/api/v1/nodes/${node.name}`, headers: bearer })).json<View>();
  t.equal((await view()).clockSkewMs, null, 'no heartbeat yet: nothing measured');
  await recordHeartbeat(pool, node.id, { requests5m: 0, errors5m: 0, spoolBytes: 0, backfillBacklog: 0, appliedConfigVersion: 0, clockSkewMs: -240_000 });
  t.equal((await view()).clockSkewMs, -240_000, 'a node 4 minutes behind');
});
