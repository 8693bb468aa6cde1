/**
 * Config versions against real PostgreSQL: a fresh installation is at version 1, a recorded change
 * bumps it and NOTIFYs zenova_config_changed only when its transaction commits, and concurrent
 * changes get distinct versions that commit in order (a writer waits while an earlier version is
 * uncommitted); versions continue past a version a node reports from before a restore.
 */
import pg from 'pg';
import t from 'tap';
import {
  CONFIG_CHANGED_CHANNEL, MAX_VERSION_CATCH_UP, continueVersionsPast, latestConfigVersion, parseConfigChangedPayload, recordConfigChange,
} from '../../control-plane/src/config/config-changes.js';
import { withTransaction } from '../../control-plane/src/nodes/with-transaction.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);

const listener = new pg.Client({ connectionString: db.url });
await listener.connect();
t.teardown(() => listener.end());
const notified: number[] = [];
listener.on('notification', (msg) => {
  if (msg.channel !== CONFIG_CHANGED_CHANNEL) return;
  const version = parseConfigChangedPayload(msg.payload);
  if (version !== undefined) notified.push(version);
});
await listener.query(`listen ${CONFIG_CHANGED_CHANNEL}`);

t.test('a fresh installation is at config version 1', async (t) => {
  t.equal(await latestConfigVersion(pool), 1);
});

t.test('a recorded change returns the next version and notifies it once committed', async (t) => {
  const before = await latestConfigVersion(pool);
  const version = await withTransaction(pool, (client) =>
    recordConfigChange(client, { entity: 'account', entityId: 'a1', action: 'create' }));
  t.equal(version, before + 1);
  t.equal(await latestConfigVersion(pool), version);
  await waitFor(() => notified.includes(version), { what: `NOTIFY of version ${version}` });
  const { rows } = await pool.query('select entity, entity_id, action from config_changes where version = $1', [version]);
  t.same(rows, [{ entity: 'account', entity_id: 'a1', action: 'create' }]);
});

t.test('a change whose transaction rolls back leaves the version and sends nothing', async (t) => {
  const before = await latestConfigVersion(pool);
  const seen = notified.length;
  await t.rejects(withTransaction(pool, async (client) => {
    await recordConfigChange(client, { entity: 'route', entityId: 'r', action: 'create' });
    throw new Error('abandon');
  }));
  t.equal(await latestConfigVersion(pool), before);
  // A later committed change proves the listener is live; the rolled-back one never arrived.
  const next = await withTransaction(pool, (client) => recordConfigChange(client, { entity: 'route', entityId: 'r', action: 'create' }));
  await waitFor(() => notified.includes(next), { what: 'the later NOTIFY' });
  t.same(notified.slice(seen), [next]);
});

t.test('concurrent changes get distinct versions, notified in increasing order', async (t) => {
  const seen = notified.length;
  const versions = await Promise.all(Array.from({ length: 12 }, (_, i) =>
    withTransaction(pool, (client) => recordConfigChange(client, { entity: 'price', entityId: `m${i}`, action: 'update' }))));
  t.equal(new Set(versions).size, versions.length, 'no two share a version');
  await waitFor(() => notified.length - seen >= versions.length, { what: 'every NOTIFY' });
  const heard = notified.slice(seen);
  t.same([...heard].sort((a, b) => a - b), heard, 'committed (and heard) in version order');
  t.same([...heard].sort((a, b) => a - b), [...versions].sort((a, b) => a - b));
});

t.test('a change waits while an earlier version is uncommitted, so versions commit in order', async (t) => {
  const first = await pool.connect();
  const second = await pool.connect();
  t.teardown(() => {
    first.release();
    second.release();
  });
  await first.query('begin');
  const firstVersion = await recordConfigChange(first, { entity: 'account', entityId: 'first', action: 'create' });
  await second.query('begin');
  const { rows: [backend] } = await second.query<{ pid: number }>('select pg_backend_pid() as pid');
  let settled = false;
  const secondVersion = recordConfigChange(second, { entity: 'account', entityId: 'second', action: 'create' })
    .finally(() => { settled = true; });
  // PostgreSQL itself says the second writer is blocked on the advisory lock.
  await waitFor(async () => {
    const { rows } = await pool.query(
      `select 1 from pg_locks where locktype = 'advisory' and not granted and pid = $1`, [backend?.pid]);
    return rows.length === 1;
  }, { what: 'the second writer to wait for the config-change lock' });
  t.equal(settled, false, 'it has no version while the first is uncommitted');
  await first.query('commit');
  t.equal(await secondVersion, firstVersion + 1);
  await second.query('commit');
});

t.test('only plain positive integers parse as a config-changed payload', async (t) => {
  t.equal(parseConfigChangedPayload('42'), 42);
  for (const bad of [undefined, '', '0', '-1', '1.5', '01', 'x', '99999999999999999']) {
    t.equal(parseConfigChangedPayload(bad), undefined, String(bad));
  }
});

t.test('versions continue past a version a node applied (a restored database), once, notified, and never by a leap past the bound', async (t) => {
  const latest = await latestConfigVersion(pool);
  t.equal(await continueVersionsPast(pool, latest), 'already', 'a node at the newest version moves nothing');
  const moved = await continueVersionsPast(pool, latest + 40);
  t.equal(moved, latest + 41, 'the next version is past the node\'s');
  t.equal(await latestConfigVersion(pool), latest + 41);
  await waitFor(() => notified.includes(latest + 41), { what: 'the notification of the continued version', timeoutMs: 5_000 });
  t.equal(await continueVersionsPast(pool, latest + 40), 'already', 'a second session reporting the same version moves nothing');
  const next = await withTransaction(pool, (client) => recordConfigChange(client, { entity: 'account', entityId: 'a2', action: 'update' }));
  t.equal(next, latest + 42, 'changes go on from there');
  t.equal(await continueVersionsPast(pool, next + MAX_VERSION_CATCH_UP + 1), 'too-far');
  t.equal(await latestConfigVersion(pool), next, 'a report too far ahead changes nothing');
});

t.test('versions continue past the newest version when a node holds another config under it, once', async (t) => {
  const latest = await latestConfigVersion(pool);
  t.equal(await continueVersionsPast(pool, latest - 1, { sameVersionDiffers: true }), 'already', 'an older version is pushed the ordinary way');
  const moved = await continueVersionsPast(pool, latest, { sameVersionDiffers: true });
  t.equal(moved, latest + 1);
  t.equal(await latestConfigVersion(pool), latest + 1);
  await waitFor(() => notified.includes(latest + 1), { what: 'the notification of the continued version', timeoutMs: 5_000 });
  t.equal(await continueVersionsPast(pool, latest, { sameVersionDiffers: true }), 'already', 'a second session holding the same version moves nothing');
});
