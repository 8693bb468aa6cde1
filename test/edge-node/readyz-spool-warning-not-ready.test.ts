// /readyz says a full or failing spool (`spoolWarning`) whenever it is so: also while the node is
// not ready for want of a config, when the answer's reason and code are the config's.
import Fastify from 'fastify';
import t from 'tap';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { readiness, registerReadinessRoutes } from '../../edge-node/src/http/readiness.routes.js';
import type { SpoolState } from '../../edge-node/src/spool/spool-store.js';

const failing: SpoolState = { bytes: 4096, quotaBytes: 1024 ** 3, fullPolicy: 'reject', full: false, writeFailing: { code: 'SQLITE_FULL', since: '2026-12-06T20:00:00.000Z' } };
const full: SpoolState = { bytes: 2048, quotaBytes: 1024, fullPolicy: 'metering-only', full: true, writeFailing: null };

t.test('a node without a config whose spool writes fail answers 503 not ready for its config, with spoolWarning', async (t) => {
  const app = Fastify();
  t.teardown(() => app.close());
  registerReadinessRoutes(app, { holder: ConfigHolder.notReady('no verified config yet'), spool: () => failing });
  const res = await app.inject({ method: 'GET', url: '/readyz' });
  t.equal(res.statusCode, 503);
  t.match(res.json(), {
    ready: false,
    code: 'ZN_ERR_NODE_NOT_READY',
    reason: 'no verified config yet',
    spoolWarning: /the request spool cannot be written since 2026-12-06T20:00:00\.000Z \(SQLITE_FULL\): new requests are refused/,
  });
});

t.test('a full spool is warned about while not ready, and a spool with room adds no warning', async (t) => {
  const notReady = ConfigHolder.notReady('no verified config yet');
  t.match(readiness({ holder: notReady, spool: () => full }), { ready: false, code: 'ZN_ERR_NODE_NOT_READY', spoolWarning: /at its quota \(1024 bytes\)/ });
  const roomy = readiness({ holder: notReady, spool: () => ({ ...full, full: false }) });
  t.equal(roomy.spoolWarning, undefined);
  t.notOk('spoolWarning' in roomy, 'no key at all');
  const noSpool = readiness({ holder: notReady });
  t.notOk('spoolWarning' in noSpool, 'none without a spool');
});

t.test('a deleted node is not ready with ZN_ERR_NODE_DELETED, also before any config verified, as its callers are refused so', async (t) => {
  const notReady = ConfigHolder.notReady('no verified config yet');
  t.match(readiness({ holder: notReady, deleted: () => true }), { ready: false, code: 'ZN_ERR_NODE_DELETED', reason: /deleted this node/ });
  t.match(readiness({ holder: notReady, deleted: () => false }), { ready: false, code: 'ZN_ERR_NODE_NOT_READY' });
  t.match(readiness({ holder: notReady, deleted: () => true, spool: () => full }), { code: 'ZN_ERR_NODE_DELETED', spoolWarning: /at its quota/ }, 'the spool still warned about');
});
