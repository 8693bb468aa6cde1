/**
 * An API key's expiresAt goes into every node's bundle as an ISO time of a four-digit year: one past
 * 9999-12-31T23:59:59.999Z in UTC (its offset applied) is refused naming the field, and one stored by
 * an older release that took it is carried as that latest time, so bundles keep building.
 */
import t from 'tap';
import { ConfigPublisher } from '../../control-plane/src/config/config-publisher.js';
import { buildNodeBundle } from '../../control-plane/src/config/bundle-builder.js';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, expectStatus, uniqueConfigName } from './config-harness.js';
import { enrolledNode, gatewaySettings, harnessSigningKey, migratedPool } from './gateway-harness.js';

const db = await testDatabase(t);
const pool = await migratedPool(t, db.url);
const { call, secretBox, version } = await configApp(t, db.url);
const signingKey = await harnessSigningKey(pool);
const node = await enrolledNode(pool, gatewaySettings(db.url));
const account = uniqueConfigName('acct');
expectStatus(await call('POST', '/api/v1/accounts', { name: account }), 201);

interface Created { apiKey: { id: string; expiresAt: string } }

t.test('an expiry past year 9999 in UTC is refused naming expiresAt; the latest ones accepted still make every node\'s bundle', async (t) => {
  const before = await version();
  for (const expiresAt of ['9999-12-31T23:59:59-12:00', '9999-12-31T23:59:59.999-00:01']) {
    const res = await call('POST', '/api/v1/api-keys', { account, name: 'far', expiresAt });
    t.equal(res.statusCode, 400, `${expiresAt}: 400`);
    t.match(res.json<{ error: { code: string; message: string } }>().error, {
      code: 'ZN_ERR_CP_INVALID_REQUEST', message: /^expiresAt: must be at most 9999-12-31T23:59:59\.999Z/,
    });
  }
  t.equal(await version(), before, 'no config version recorded');

  const latest = expectStatus<Created>(await call('POST', '/api/v1/api-keys', { account, name: 'latest', expiresAt: '9999-12-31T23:59:59.999Z' }), 201);
  const east = expectStatus<Created>(await call('POST', '/api/v1/api-keys', { account, name: 'east', expiresAt: '9999-12-31T23:59:59+14:00' }), 201);
  const bundle = await buildNodeBundle(pool, node.id, secretBox!);
  t.equal(bundle.apiKeys.find((k) => k.id === latest.apiKey.id)?.expiresAt, '9999-12-31T23:59:59.999Z');
  t.equal(bundle.apiKeys.find((k) => k.id === east.apiKey.id)?.expiresAt, '9999-12-31T09:59:59.000Z', 'the offset applied');
  await t.resolves(new ConfigPublisher({ pool, secretBox: secretBox!, signingKey }).bundleFor(node.id), 'signed and pushed');
});

t.test('an expiry past year 9999 stored by an older release is carried as the latest time a bundle holds, so bundles still build', async (t) => {
  const { apiKey } = expectStatus<Created>(await call('POST', '/api/v1/api-keys', { account, name: 'legacy' }), 201);
  await pool.query("update api_keys set expires_at = '9999-12-31T23:59:59-12:00' where id = $1", [apiKey.id]);
  const bundle = await buildNodeBundle(pool, node.id, secretBox!);
  t.equal(bundle.apiKeys.find((k) => k.id === apiKey.id)?.expiresAt, '9999-12-31T23:59:59.999Z');
  await t.resolves(new ConfigPublisher({ pool, secretBox: secretBox!, signingKey }).bundleFor(node.id), 'signed and pushed');
});
