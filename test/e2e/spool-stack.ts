// Shared by the spool e2e tests: a control plane, a fake upstream and an enrolled serving node, a
// steady caller load that remembers the x-request-id of every complete answer, and the ingested rows.
import { join } from 'node:path';
import pg from 'pg';
import type { Test } from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { configureDemo, enrollNewNode, freePort, httpsMaterial, startControlPlane, startNodeServe, tempDir } from './stack.js';

export interface Load {
  /** x-request-id of every request whose complete 200 response was read. */
  served: Set<string>;
  failed: number;
  stop(): Promise<void>;
}

/** `concurrency` callers in a loop against whatever URL `target()` gives, until stopped. */
export function steadyLoad(target: () => string, apiKey: string, concurrency = 4): Load {
  const served = new Set<string>();
  let failed = 0;
  let running = true;
  const worker = async (): Promise<void> => {
    while (running) {
      try {
        const res = await fetch(`${target()}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'spool me' }] }),
        });
        const body = (await res.json()) as { choices?: unknown[] };
        const id = res.headers.get('x-request-id');
        if (res.status === 200 && Array.isArray(body.choices) && id !== null) served.add(id);
        else failed += 1;
      } catch {
        failed += 1;
        // The node is down (killed): try again shortly rather than spin.
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
  };
  const workers = Array.from({ length: concurrency }, () => worker());
  return {
    served,
    get failed() {
      return failed;
    },
    stop: async () => {
      running = false;
      await Promise.all(workers);
    },
  };
}

export async function ingested(db: pg.Pool, nodeId: string): Promise<{ ids: Map<string, string>; rows: number; idRows: number }> {
  const rows = await db.query<{ request_id: string; status: string }>('select request_id, status from request_records where node_id = $1', [nodeId]);
  const idRows = await db.query<{ n: string }>('select count(*) as n from request_record_ids where node_id = $1', [nodeId]);
  return { ids: new Map(rows.rows.map((r) => [r.request_id, r.status])), rows: rows.rowCount ?? 0, idRows: Number(idRows.rows[0]!.n) };
}

export async function spoolStack(t: Test, name: string) {
  const db = await testDatabase(t);
  const pool = new pg.Pool({ connectionString: db.url, max: 2 });
  // The database stops at teardown before the pool may have ended: idle clients then error.
  pool.on('error', () => undefined);
  t.teardown(() => pool.end());
  const work = tempDir(t, `zn-e2e-${name}-`);
  const https = await httpsMaterial(join(work, 'https'));
  const gatewayPort = await freePort();
  const listenPort = await freePort();
  const cpOpts = { db, https, gatewayTlsDir: join(work, 'gw'), gatewayPort, listenPort };
  const cp = await startControlPlane(t, cpOpts);
  const upstream = await startFakeUpstream(t);
  const { apiKey } = await configureDemo(cp, upstream.url);
  const stateDir = join(work, 'state');
  const created = await enrollNewNode(t, cp, name, stateDir);
  const node = await startNodeServe(t, { stateDir });
  await node.proc.waitForLine(/"msg":"config applied"/, 30_000);
  return { db, pool, cp, cpOpts, apiKey, stateDir, nodeId: created.node.id, node, upstream };
}

