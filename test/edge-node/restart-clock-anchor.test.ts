// A node restarted in the same boot while the control plane is out of reach keeps judging key
// expiries by the control plane's time: it takes the last anchor from control-status.json at start
// rather than falling back to this host's wall clock, which here is 10 min behind the control plane's;
// and it writes that anchor back, so the restart after it (still out of reach) keeps it too.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { currentBootId } from '../../edge-node/src/control/control-plane-time.js';
import { saveControlStatus } from '../../edge-node/src/control/control-status.js';
import { loadEnrolledConfig } from '../../edge-node/src/config/enrolled-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { createTestCa } from '../fixtures/tls.js';
import { bundleKey, createSigner, newCallerKey, signedPush, testBundle } from './config-fixtures.js';
import { writeEnrolledState } from './control-fixtures.js';
import { chatStatus as chat, serveNode } from './served-node.js';

const MINUTE = 60_000;

t.test("a node restarted while the control plane is unreachable judges key expiries by the control plane's time from its last anchor", async (t) => {
  const upstream = await startFakeUpstream(t);
  const signer = createSigner();
  // Nothing listens at the gateway's address: the control plane stays out of reach.
  const state = await writeEnrolledState(path.join(t.testdir({}), 'state'), { target: '127.0.0.1:1', ca: await createTestCa() }, { configSigningPublicKeyPem: signer.publicKeyPem });
  const expiresSoon = newCallerKey();
  const expiresLater = newCallerKey();
  const keys = [
    // Valid for 5 more minutes by this host's clock, expired 5 min ago by the control plane's.
    bundleKey('soon', expiresSoon.sha256, { expiresAt: new Date(Date.now() + 5 * MINUTE).toISOString() }),
    bundleKey('later', expiresLater.sha256, { expiresAt: new Date(Date.now() + 20 * MINUTE).toISOString() }),
  ];
  const { applier } = await loadEnrolledConfig(state.dir, state.identity, createLogger({ level: 'silent' }));
  t.match(await applier.apply(signedPush(testBundle({ nodeId: state.identity.nodeId, version: 1, upstreamUrl: upstream.url, keys }), signer)), { ok: true });
  // What the previous run's link left: its last HelloAck found the control plane 10 min ahead.
  const now = new Date().toISOString();
  await saveControlStatus(state.store, {
    connected: false,
    since: now,
    lastError: null,
    sessionId: null,
    pid: 999_999,
    serving: false,
    updatedAt: now,
    clock: {
      controlPlaneMs: Date.now() + 10 * MINUTE,
      hostMonotonicMs: Number(process.hrtime.bigint() / 1_000_000n),
      ...(currentBootId() !== null ? { bootId: currentBootId()! } : {}),
      skewMs: -10 * MINUTE,
      measuredAt: now,
      maxSkewMs: 30_000,
    },
  });

  const statusFile = path.join(state.dir, 'control-status.json');
  const anchorInFile = (): { pid: number; clock?: { controlPlaneMs: number; measuredAt: string } } => JSON.parse(readFileSync(statusFile, 'utf8')) as never;
  for (const run of ['first', 'second']) {
    const before = anchorInFile().pid;
    const { proc, url } = await serveNode(t, state.dir);
    t.same(await chat(url, expiresSoon.secret), { status: 401, code: 'ZN_ERR_API_KEY_EXPIRED' }, `${run} restart: expired on the control plane's clock`);
    t.match(await chat(url, expiresLater.secret), { status: 200 }, `${run} restart: a key the control plane still counts valid is served`);
    // Its control link has written the file (with its own pid): with the anchor it adopted, as measured.
    const written = await waitFor(() => (anchorInFile().pid !== before ? anchorInFile() : undefined), { what: 'the control link to write control-status.json' });
    t.match(written.clock, { measuredAt: now }, `${run} restart: the anchor is written back as it was measured`);
    t.equal(await proc.stop('SIGTERM'), 0);
  }
});
