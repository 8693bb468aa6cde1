// A node whose host clock drifted after enrollment judges the control plane's expiries by the
// control plane's time (anchored at each HelloAck, carried on by the monotonic clock), and says
// how far off its clock is: a warning in its log, and a clock line in `zenova-node status`.
import t from 'tap';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { startConnectLoop } from '../../edge-node/src/control/connect-loop.js';
import { ControlPlaneTime, skewFromAnchor } from '../../edge-node/src/control/control-plane-time.js';
import { loadControlStatus } from '../../edge-node/src/control/control-status.js';
import { createLogger } from '../../edge-node/src/logger.js';
import { systemClock } from '../../edge-node/src/pipeline/clock.js';
import type { Clock } from '../../edge-node/src/pipeline/clock.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { waitFor } from '../fixtures/wait-for.js';
import { runNodeCli } from './cli-capture.js';
import { bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { startFakeGateway, writeEnrolledState } from './control-fixtures.js';
import { startNode } from './node-harness.js';

const MINUTE = 60_000;

/** The host's clock `offsetMs` off from the real one (the control plane's); monotonic clocks untouched. */
function hostClockOff(offset: () => number): Clock {
  return { ...systemClock, now: () => Date.now() + offset() };
}

/** A node app whose host clock is `offsetMs` off, anchored to the control plane's (real) time. */
async function nodeWithSkew(t: Parameters<typeof startNode>[0], offsetMs: number, keys: Parameters<typeof testBundle>[0]['keys'], upstreamUrl: string) {
  const controlPlaneTime = new ControlPlaneTime(hostClockOff(() => offsetMs));
  controlPlaneTime.observe(Date.now(), 2);
  const holder = ConfigHolder.ready(fromBundle(testBundle({ nodeId: 'node-1', version: 1, upstreamUrl, keys })));
  return startNode(t, holder, { clock: controlPlaneTime.clock(hostClockOff(() => offsetMs)) });
}

async function callStatus(baseURL: string, key: string): Promise<{ status: number; code: string | undefined }> {
  const res = await fetch(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }),
  });
  const body = (await res.json()) as { error?: { code?: string } };
  return { status: res.status, code: body.error?.code };
}

t.test('a node whose clock is 4 min behind refuses a key the control plane\'s time has expired', async (t) => {
  const upstream = await startFakeUpstream(t);
  const key = newCallerKey();
  // Expired a minute ago on the control plane's clock; three minutes ahead on the host's.
  const node = await nodeWithSkew(t, -4 * MINUTE, [bundleKey('k-expired', key.sha256, { expiresAt: new Date(Date.now() - MINUTE).toISOString() })], upstream.url);
  t.same(await callStatus(node.baseURL, key.secret), { status: 401, code: 'ZN_ERR_API_KEY_EXPIRED' });
});

t.test('a node whose clock is 2 h ahead accepts a key valid for another hour on the control plane\'s clock', async (t) => {
  const upstream = await startFakeUpstream(t);
  const key = newCallerKey();
  const node = await nodeWithSkew(t, 2 * 60 * MINUTE, [bundleKey('k-hour', key.sha256, { expiresAt: new Date(Date.now() + 60 * MINUTE).toISOString() })], upstream.url);
  t.same(await callStatus(node.baseURL, key.secret), { status: 200, code: undefined });
});

t.test('the control plane\'s time holds through a later step of the host\'s wall clock', async (t) => {
  let offset = 0;
  const time = new ControlPlaneTime(hostClockOff(() => offset));
  const serverTime = Date.now() + 4 * MINUTE;
  time.observe(serverTime, 0);
  offset = -2 * 60 * MINUTE;
  t.ok(Math.abs(time.now() - (serverTime + 0)) < 5_000, 'still the control plane\'s time after the host stepped back 2 h');
  t.ok(Math.abs((time.skewMs() ?? 0) - (-2 * 60 * MINUTE - 4 * MINUTE)) < 5_000, 'the skew includes the step');
  t.equal(new ControlPlaneTime(hostClockOff(() => offset)).skewMs(), null, 'no HelloAck yet: no anchor, no skew (the host clock is used)');
});

t.test('an anchor from an earlier boot of the host is neither adopted nor used for the skew, however far the monotonic clock has run since', async (t) => {
  // Taken 60 s after the earlier boot; this boot's monotonic clock has since passed that reading.
  const uptime = 5 * 60 * MINUTE;
  const thisBoot: Clock = { ...systemClock, hostMonotonic: () => uptime };
  const earlier = { controlPlaneMs: Date.now() - 6 * 60 * MINUTE, hostMonotonicMs: 60_000, bootId: 'boot-before' };
  const follower = new ControlPlaneTime(thisBoot, () => 'boot-now');
  follower.adopt(earlier);
  t.equal(follower.anchor(), undefined, 'not adopted');
  t.ok(Math.abs(follower.now() - Date.now()) < 5_000, "the host's clock is used, not a time hours in the past");
  t.equal(skewFromAnchor(earlier, thisBoot, 'boot-now'), null, 'no skew worked out from it');
  t.equal(skewFromAnchor({ ...earlier, bootId: undefined }, thisBoot, 'boot-now'), null, 'nor from one that names no boot');
  const sameBoot = { ...earlier, bootId: 'boot-now', controlPlaneMs: Date.now() - (uptime - 60_000) };
  follower.adopt(sameBoot);
  t.same(follower.anchor(), sameBoot, "this boot's anchor is adopted");
  t.ok(Math.abs(skewFromAnchor(sameBoot, thisBoot, 'boot-now') ?? Infinity) < 5_000, 'and gives the skew');
  const observed = new ControlPlaneTime(thisBoot, () => 'boot-now');
  observed.observe(Date.now());
  t.equal(observed.anchor()?.bootId, 'boot-now', 'an anchor records the boot it was taken in');
});

t.test('a connected node whose clock is off warns once naming the skew, again when it grows, and status shows it', async (t) => {
  // The control plane is 4 minutes ahead of this host.
  const gateway = await startFakeGateway(t, { serverTime: () => Date.now() + 4 * MINUTE, heartbeatIntervalMs: 50 });
  const state = await writeEnrolledState(t.testdir({}), gateway);
  let step = 0;
  const controlPlaneTime = new ControlPlaneTime(hostClockOff(() => step));
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) } });
  let heartbeats = 0;
  const loop = startConnectLoop({
    store: state.store,
    logger,
    facts: { version: '0.1.0', hostname: 'h', arch: 'x64' },
    figures: () => {
      heartbeats += 1;
      return { requests5m: 0, errors5m: 0, spoolBytes: 0, backfillBacklog: 0, appliedConfigVersion: 0, ready: true };
    },
    reconnect: { baseMs: 20, maxMs: 200 },
    controlPlaneTime,
  });
  t.teardown(() => loop.stop());
  const warnings = (): Array<Record<string, unknown>> => lines.filter((l) => l.code === 'CLOCK_SKEW');
  await waitFor(() => loop.status().state === 'connected', { what: 'a session' });
  const first = await waitFor(() => warnings()[0], { what: 'the clock warning' });
  t.match(first, { level: 40, skewMs: Number, maxSkewMs: 30_000, hostClock: /^\d{4}-/, controlPlaneClock: /^\d{4}-/, advice: /4 min \d+ s behind the control plane's/ });
  t.ok(Math.abs((first.skewMs as number) + 4 * MINUTE) < 5_000, 'the skew is about -4 min');
  t.ok(Math.abs(controlPlaneTime.now() - (Date.now() + 4 * MINUTE)) < 5_000, "the node's control-plane time is the gateway's");

  const seen = heartbeats;
  await waitFor(() => heartbeats >= seen + 3, { what: 'more heartbeats' });
  t.equal(warnings().length, 1, 'once per session while the skew stays the same');

  // The host's clock steps back 2 more minutes: the skew grew, so it is said again.
  step = -2 * MINUTE;
  const second = await waitFor(() => warnings()[1], { what: 'a second warning after the skew grew' });
  t.match(second, { advice: /6 min \d+ s behind/ });

  const file = await loadControlStatus(state.store);
  t.match(file?.clock, { skewMs: Number, maxSkewMs: 30_000, measuredAt: /^\d{4}-/ });
  const status = await runNodeCli(['status', '--state-dir', state.dir]);
  t.match(status.stdout, /clock:\s+SKEWED: this host's clock is \d+ min \d+ s behind the control plane's/);
});
