// The node-event listener's connection going silent — no FIN, no RST: a hung server, a failover, a
// NAT or firewall dropping the flow — is noticed by its liveness probe and re-opened, and
// onReconnect re-reads what was missed: a config change NOTIFYed into the silence reaches the
// gateway within the probe's bound. Before, a deaf LISTEN looked like a quiet one for hours.
import pino from 'pino';
import t from 'tap';
import { latestConfigVersion, recordConfigChange } from '../../control-plane/src/config/config-changes.js';
import { migrate } from '../../control-plane/src/db/migrate.js';
import { createPool } from '../../control-plane/src/db/pool.js';
import { startNodeEventListener } from '../../control-plane/src/gateway/node-event-listener.js';
import { withTransaction } from '../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../fixtures/postgres.js';
import { startSilentTcpProxy } from '../fixtures/silent-tcp-proxy.js';
import { runEach } from '../fixtures/teardown-steps.js';
import { waitFor } from '../fixtures/wait-for.js';

const db = await testDatabase(t);
const direct = createPool({ databaseUrl: db.url });
t.teardown(() => direct.end());
await migrate(direct);

const PROBE_INTERVAL_MS = 300;
const PROBE_TIMEOUT_MS = 500;
const MIN_RETRY_MS = 50;
// The probe's bound plus the first re-open and the re-read, with room for a loaded machine.
const REACHED_WITHIN_MS = PROBE_INTERVAL_MS + PROBE_TIMEOUT_MS + 3_000;

const commitConfigChange = (): Promise<number> =>
  withTransaction(direct, (client) => recordConfigChange(client, { entity: 'api-key', entityId: null, action: 'revoke' }));

t.test('a config change committed while the listening connection is silent reaches the gateway within the probe bound through onReconnect', async (t) => {
  const proxy = await startSilentTcpProxy(t, db.url);
  const known: number[] = [];
  let reconnects = 0;
  const listener = await startNodeEventListener({
    databaseUrl: proxy.url,
    logger: pino({ level: 'silent' }),
    onEvent: () => undefined,
    onConfigChanged: (version) => void known.push(version),
    // What the gateway does: re-read the latest version (over a connection of its own).
    onReconnect: () => {
      reconnects += 1;
      void latestConfigVersion(direct).then((version) => void known.push(version));
    },
    minRetryMs: MIN_RETRY_MS,
    probeIntervalMs: PROBE_INTERVAL_MS,
    probeTimeoutMs: PROBE_TIMEOUT_MS,
  });
  t.teardown(() => runEach('the proxied listener', () => proxy.close(), () => listener.close()));

  const heard = await commitConfigChange();
  await waitFor(() => known.includes(heard), { what: 'the change to be heard while the connection works' });
  t.equal(proxy.silenceOpen(), 1, 'the listening connection goes silent');

  const committedAt = Date.now();
  const missed = await commitConfigChange();
  const reachedAfter = await waitFor(() => (known.includes(missed) ? Date.now() - committedAt : undefined), {
    what: 'the change NOTIFYed into the silence to reach the gateway',
    timeoutMs: REACHED_WITHIN_MS,
  });
  t.pass(`reached after ${reachedAfter} ms`);
  t.equal(reconnects, 1, 'through one re-open of the connection');
  t.equal(proxy.accepted(), 2, 'on a new connection');

  const after = await commitConfigChange();
  await waitFor(() => known.includes(after), { what: 'the re-opened connection to hear the next change' });
});
