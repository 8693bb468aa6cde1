// The gateway's parts log under their own `component` (gateway, node-events, records, billing).
// A part given the gateway's logger and binding its own name wrote the key twice in one JSON line
// ({"component":"gateway",…,"component":"node-events"}): log shippers keep either one, or refuse it.
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { gatewayIdentity, gatewaySettings, migratedPool, startTestGateway } from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);

t.test('every gateway log line names its component once, and the node-event listener names itself', async (t) => {
  const gateway = await startTestGateway(t, { pool, settings: gatewaySettings(db.url), identity: await gatewayIdentity() });
  const reopened = (): boolean => gateway.log.lines().some((l) => l.msg === 'node-event connection re-opened');
  await pool.query("select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and application_name = 'zenova-control-node-events'");
  await waitFor(reopened, { what: 'the event connection to be re-opened' });

  const raw = gateway.log.text().split('\n').filter((l) => l.trim() !== '');
  t.ok(raw.length >= 3, 'lines were logged');
  for (const line of raw) t.ok((line.match(/"component":/g) ?? []).length <= 1, `one component in ${line.slice(0, 160)}`);
  const components = (msg: string): unknown[] => gateway.log.lines().filter((l) => l.msg === msg).map((l) => l.component);
  t.same(components('node-event connection re-opened'), ['node-events']);
  t.same(components('listening for node events'), ['node-events']);
  t.same(components('node gateway bound'), ['gateway']);
});
