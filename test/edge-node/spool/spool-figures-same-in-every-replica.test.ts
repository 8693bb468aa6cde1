// Replicas of a node (serve --replicas K) share spool.db, and each answers the admin port's scrape
// with its own metrics: the spool's figures (zenova_node_spool_bytes, zenova_node_backfill_backlog)
// are the state dir's, so each replica's scrape shows what the shared file holds, not its own
// estimate: records written through one replica show in the other's scrape, and both agree.
import t from 'tap';
import type { Test } from 'tap';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { createNodeMetrics } from '../../../edge-node/src/metrics/create-node-metrics.js';
import { openNodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import type { NodeSpool } from '../../../edge-node/src/spool/open-node-spool.js';
import { readSpoolFigures } from '../../../edge-node/src/spool/spool-figures.js';
import type { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { parsePrometheusText, sampleValue } from '../metrics/prometheus-text.js';
import { NODE_ID, quietLogger, record, tempStateDir } from './spool-helpers.js';

interface Replica {
  spool: NodeSpool;
  store: SpoolStore;
  scrape(): Promise<{ bytes: number; backlog: number }>;
}

/** One replica's spool as serve opens it (ZENOVA_NODE_REPLICAS=2), and its metrics as the supervisor's scrape reads them. */
async function replica(t: Test, stateDir: string): Promise<Replica> {
  const spool = await openNodeSpool({ stateDir, nodeId: NODE_ID, holder: ConfigHolder.notReady('test'), logger: quietLogger(), synchronous: 'normal', replicas: 2 });
  t.teardown(() => spool.close());
  const metrics = await createNodeMetrics({ adminListen: undefined, figures: () => spool.figures(), logger: quietLogger() });
  t.teardown(() => metrics.close());
  return {
    spool,
    store: spool.spool as SpoolStore,
    scrape: async () => {
      const parsed = parsePrometheusText(metrics.render());
      return { bytes: sampleValue(parsed, 'zenova_node_spool_bytes') ?? NaN, backlog: sampleValue(parsed, 'zenova_node_backfill_backlog') ?? NaN };
    },
  };
}

/** The file's figures read on a connection of their own, as `zenova-node status` reads them. */
function fileFigures(stateDir: string): { bytes: number; backlog: number } {
  const figures = readSpoolFigures(stateDir);
  if (figures === null || figures.error !== null) throw new Error(`the spool could not be read: ${figures?.error ?? 'no spool'}`);
  return { bytes: figures.bytes, backlog: figures.backlog };
}

t.test("a record written through one replica shows at once in the other replica's scraped backlog and spool bytes", async (t) => {
  const dir = tempStateDir(t);
  const one = await replica(t, dir);
  const two = await replica(t, dir);
  t.same(await one.scrape(), await two.scrape(), 'the same figures before anything is written');

  const bodies = { request: 'q'.repeat(20_000), response: 'a'.repeat(20_000), truncated: false };
  // Two commits in a row: the second is within MEASURE_EVERY_MS of the first's measurement, so
  // the writer holds an estimate (its upper bound) afterwards.
  await one.spool.spool.finalise(record('r-through-one-1', { bodies }));
  await one.spool.spool.finalise(record('r-through-one-2', { bodies }));
  const file = fileFigures(dir);
  t.equal(file.backlog, 2);
  // No wait: the scrape itself reads what the other connection committed.
  t.same(await two.scrape(), file, "the other replica's scrape shows the file's backlog and bytes");
  t.equal((await one.scrape()).backlog, 2, "the writing replica's backlog");
  // The writer counted its own commit by an upper bound; it measures the file once the estimate is
  // MEASURE_EVERY_MS (250 ms) old, even with nothing committed since.
  const settled = await waitFor(
    async () => {
      const [a, b] = [await one.scrape(), await two.scrape()];
      return a.bytes === b.bytes && a.backlog === b.backlog ? a : undefined;
    },
    { what: 'both replicas scraping the same spool figures', timeoutMs: 5000, intervalMs: 20 },
  );
  t.same(settled, fileFigures(dir), "both show the file's figures");
});

t.test("records delivered and deleted by the replica holding the control link leave the other replica's scraped backlog at once", async (t) => {
  const dir = tempStateDir(t);
  const holder = await replica(t, dir);
  const other = await replica(t, dir);
  await other.spool.spool.finalise(record('r-1'));
  await other.spool.spool.finalise(record('r-2'));
  t.equal((await holder.scrape()).backlog, 2, "the holder's scrape counts the other replica's records");

  const rows = holder.store.backlogAfter(0, 10);
  const commits = holder.store.commitCount();
  holder.store.deleteAcknowledged(rows[0]!.sequence, rows[rows.length - 1]!.sequence);
  await waitFor(() => holder.store.commitCount() > commits, { what: 'the delete committed' });
  t.equal((await holder.scrape()).backlog, 0);
  t.same(await other.scrape(), fileFigures(dir), "the other replica's scrape shows the backlog gone and the file's bytes");
  t.equal(fileFigures(dir).backlog, 0);
});
