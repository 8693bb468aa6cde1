// Target health on its own, with time passed in by hand: ejection after consecutive failures,
// what resets the count, the one probe per cooldown, doubling cooldowns, and that nothing is ever
// taken out of a plan.
import t from 'tap';
import type { RuntimeConfig, RuntimeTarget, RuntimeUpstream } from '../../../edge-node/src/config/runtime-config.js';
import { TargetHealth } from '../../../edge-node/src/routing/target-health.js';

function upstream(name: string, baseUrl = `http://127.0.0.1:9/${name}/v1`): RuntimeUpstream {
  return { name, kind: 'openai-compatible', baseUrl, apiKey: undefined, timeoutMs: 1000 };
}
function target(name: string, model = 'm', baseUrl?: string): RuntimeTarget {
  return { upstream: upstream(name, baseUrl), upstreamModel: model, weight: 1 };
}
const names = (plan: RuntimeTarget[]) => plan.map((x) => `${x.upstream.name}/${x.upstreamModel}`);

t.test('a plan is returned as it is (the same array) while no target has failed', async (t) => {
  const health = new TargetHealth();
  const plan = [target('a'), target('b')];
  t.equal(health.order(plan, 0), plan);
  health.note(plan[0]!, 'reachable', 1);
  t.equal(health.order(plan, 2), plan, 'a good reply holds no state');
});

t.test('a target is ejected after the threshold of consecutive failures and is then tried after everything else', async (t) => {
  const health = new TargetHealth({ failureThreshold: 3, baseCooldownMs: 1000 });
  const a = target('a');
  const plan = [a, target('b'), target('fallback')];
  t.equal(health.note(a, 'failed', 0), undefined);
  t.equal(health.note(a, 'failed', 1), undefined);
  t.same(names(health.order(plan, 2)), ['a/m', 'b/m', 'fallback/m'], 'two failures: still in its place');
  t.equal(health.note(a, 'failed', 3), 'ejected');
  t.ok(health.isEjected(a));
  t.same(names(health.order(plan, 4)), ['b/m', 'fallback/m', 'a/m'], 'ejected: last, after the fallbacks');
  t.same(names(health.order([a], 5)), ['a/m'], 'a plan of only that target still has it: nothing is refused for health');
});

t.test('a good reply in between starts the count again, and a neutral one changes nothing', async (t) => {
  const health = new TargetHealth({ failureThreshold: 3 });
  const a = target('a');
  health.note(a, 'failed', 0);
  health.note(a, 'failed', 1);
  t.equal(health.note(a, 'reachable', 2), undefined, 'not ejected, so nothing to restore');
  health.note(a, 'failed', 3);
  health.note(a, 'failed', 4);
  t.notOk(health.isEjected(a), 'two failures after the good reply');
  t.equal(health.note(a, 'neutral', 5), undefined);
  t.equal(health.note(a, 'failed', 6), 'ejected', 'the neutral reply (caller gone, 429) did not reset the count');
});

t.test('targets are told apart by upstream, model and base URL', async (t) => {
  const health = new TargetHealth({ failureThreshold: 1 });
  const a = target('a', 'm1');
  health.note(a, 'failed', 0);
  t.ok(health.isEjected(a));
  t.ok(health.isEjected(target('a', 'm1')), 'the same target in a new config snapshot');
  t.notOk(health.isEjected(target('a', 'm2')), 'another model of the same upstream');
  t.notOk(health.isEjected(target('a', 'm1', 'http://127.0.0.1:10/moved/v1')), 'the upstream moved to another base URL');
  t.notOk(health.isEjected(target('b', 'm1')));
});

t.test('when its cooldown is over, one plan tries the target first as a probe while the others keep it last', async (t) => {
  const health = new TargetHealth({ failureThreshold: 1, baseCooldownMs: 1000 });
  const a = target('a');
  const plan = [target('b'), a];
  health.note(a, 'failed', 0);
  t.same(names(health.order(plan, 999)), ['b/m', 'a/m'], 'still cooling down');
  t.same(names(health.order(plan, 1000)), ['a/m', 'b/m'], 'the probe: first');
  t.same(names(health.order(plan, 1001)), ['b/m', 'a/m'], 'the next plan while the probe runs: last');
  t.same(names(health.order(plan, 1500)), ['b/m', 'a/m']);
  t.same(names(health.order(plan, 2000)), ['a/m', 'b/m'], 'a probe that never reached it: another one a cooldown later');
});

t.test("a fallback's probe goes first among the fallbacks only: never ahead of the alias's own healthy targets", async (t) => {
  const health = new TargetHealth({ failureThreshold: 1, baseCooldownMs: 1000 });
  const [a, b, f1, f2] = [target('a'), target('b'), target('f1'), target('f2')];
  const plan = [a, b, f1, f2];
  health.note(f2, 'failed', 0);
  t.same(names(health.order(plan, 999, 2)), ['a/m', 'b/m', 'f1/m', 'f2/m'], 'still cooling down: last');
  t.same(names(health.order(plan, 1000, 2)), ['a/m', 'b/m', 'f2/m', 'f1/m'], "the probe: first of the fallbacks, after the alias's targets");
  health.note(b, 'failed', 1000);
  t.same(names(health.order(plan, 3000, 2)), ['b/m', 'a/m', 'f1/m', 'f2/m'], "an alias's own target probed first of all");
});

t.test('a probe that answers puts the target back in its place', async (t) => {
  const health = new TargetHealth({ failureThreshold: 1, baseCooldownMs: 1000 });
  const a = target('a');
  health.note(a, 'failed', 0);
  health.order([a], 1000);
  t.equal(health.note(a, 'reachable', 1010), 'restored');
  t.notOk(health.isEjected(a));
  const plan = [a, target('b')];
  t.equal(health.order(plan, 1011), plan, 'no state left');
  t.equal(health.note(a, 'failed', 1020), 'ejected', 'the count starts again from the threshold');
});

t.test('a failed probe ejects the target again for twice as long, up to the longest cooldown', async (t) => {
  const health = new TargetHealth({ failureThreshold: 1, baseCooldownMs: 1000, maxCooldownMs: 3000 });
  const a = target('a');
  const plan = [target('b'), a];
  t.equal(health.note(a, 'failed', 0), 'ejected');
  let now = 0;
  const gaps: number[] = [];
  for (let probe = 0; probe < 4; probe += 1) {
    let next = now + 1;
    // The first plan (by the millisecond) that puts the target first is the next probe.
    while (names(health.order(plan, next))[0] !== 'a/m') next += 1;
    gaps.push(next - now);
    now = next;
    t.equal(health.note(a, 'failed', now), undefined, `probe ${probe + 1} failed: ejected again, no new ejection to report`);
    t.ok(health.isEjected(a));
  }
  t.same(gaps, [1000, 2000, 3000, 3000], 'the first cooldown, then doubled, then capped');
});

t.test('when every target is ejected they are all still tried, in their order', async (t) => {
  const health = new TargetHealth({ failureThreshold: 1, baseCooldownMs: 1000 });
  const a = target('a');
  const b = target('b');
  health.note(a, 'failed', 0);
  health.note(b, 'failed', 0);
  t.same(names(health.order([a, b], 10)), ['a/m', 'b/m']);
  t.same(names(health.order([a, b], 1000)), ['a/m', 'b/m'], 'one probe (a), b last');
  t.same(names(health.order([b, a], 1001)), ['b/m', 'a/m'], 'b probes next: one probe per plan, the first whose cooldown is over');
});

t.test('failures while ejected that are not a probe\'s (calls already under way, last resorts) do not lengthen the cooldown', async (t) => {
  const health = new TargetHealth({ failureThreshold: 2, baseCooldownMs: 1000 });
  const a = target('a');
  const plan = [target('b'), a];
  health.note(a, 'failed', 0);
  t.equal(health.note(a, 'failed', 1), 'ejected');
  for (let i = 0; i < 50; i += 1) t.equal(health.note(a, 'failed', 2 + i), undefined);
  t.same(names(health.order(plan, 1000)), ['b/m', 'a/m'], 'not yet: ejected at 1 for 1000 ms');
  t.same(names(health.order(plan, 1001)), ['a/m', 'b/m'], 'probed after the first cooldown, not a doubled one');
});

t.test('a stream begun before its target was ejected that ends well afterwards does not put the target back; its probe does', async (t) => {
  const health = new TargetHealth({ failureThreshold: 2, baseCooldownMs: 1000 });
  const a = target('a');
  const plan = [target('b'), a];
  health.note(a, 'failed', 1, 1);
  t.equal(health.note(a, 'failed', 2, 2), 'ejected');
  t.equal(health.note(a, 'reachable', 500, 0), undefined, 'the stream started at 0, before the ejection at 2');
  t.ok(health.isEjected(a));
  t.same(names(health.order(plan, 501)), ['b/m', 'a/m'], 'still last');
  t.same(names(health.order(plan, 1002)), ['a/m', 'b/m'], 'probed after the first cooldown: nothing was reset');
  t.equal(health.note(a, 'reachable', 1010, 1002), 'restored', 'the probe started after the ejection');
});

t.test('a failure of an attempt started before the probe was handed out is not the probe\'s answer', async (t) => {
  const health = new TargetHealth({ failureThreshold: 1, baseCooldownMs: 1000 });
  const a = target('a');
  const plan = [target('b'), a];
  t.equal(health.note(a, 'failed', 0, 0), 'ejected');
  t.same(names(health.order(plan, 1000)), ['a/m', 'b/m'], 'the probe');
  t.equal(health.note(a, 'failed', 1005, 500), undefined, 'a stream started at 500 breaks while the probe runs');
  t.equal(health.note(a, 'failed', 1500, 1000), undefined, 'the probe fails');
  t.same(names(health.order(plan, 3499)), ['b/m', 'a/m'], 'ejected again for twice as long from the probe\'s failure');
  t.same(names(health.order(plan, 3500)), ['a/m', 'b/m']);
});

t.test('a probe that outlasts the cooldown and then fails is still the probe\'s answer: the cooldown doubles', async (t) => {
  const health = new TargetHealth({ failureThreshold: 1, baseCooldownMs: 1000, maxCooldownMs: 60_000 });
  const a = target('a');
  const plan = [target('b'), a];
  t.equal(health.note(a, 'failed', 0, 0), 'ejected');
  t.same(names(health.order(plan, 1000)), ['a/m', 'b/m'], 'the probe, sent at 1000');
  // The probe hangs for 5 s (a host that drops packets); the cooldown it set passes meanwhile.
  t.same(names(health.order(plan, 2000)), ['a/m', 'b/m'], 'a plan after that cooldown tries it first too');
  t.equal(health.note(a, 'failed', 6000, 1000), undefined, 'the first probe times out at 6000');
  t.same(names(health.order(plan, 7999)), ['b/m', 'a/m'], 'ejected again for twice the first cooldown from its failure');
  t.same(names(health.order(plan, 8000)), ['a/m', 'b/m']);
});

t.test('a probe that ends with no verdict (a 429, the caller gone) is no longer out: the next probe\'s success is not lost to an older attempt\'s failure', async (t) => {
  const health = new TargetHealth({ failureThreshold: 1, baseCooldownMs: 1000 });
  const a = target('a');
  const plan = [target('b'), a];
  t.equal(health.note(a, 'failed', 0, 0), 'ejected');
  t.same(names(health.order(plan, 1000)), ['a/m', 'b/m'], 'the first probe, sent at 1000');
  t.equal(health.note(a, 'neutral', 1100, 1000), undefined, 'it gets a 429');
  // A last-resort stream to the target starts at 1500 and runs on.
  t.same(names(health.order(plan, 2000)), ['a/m', 'b/m'], 'the second probe, sent at 2000');
  t.equal(health.note(a, 'failed', 2100, 1500), undefined, 'the stream started at 1500 breaks: not the second probe\'s answer');
  t.equal(health.note(a, 'reachable', 2200, 2000), 'restored', 'the second probe answers');
  t.notOk(health.isEjected(a));
});

// keysChanged reads only a config's upstreams.
function configOf(...upstreams: RuntimeUpstream[]): RuntimeConfig {
  return { upstreams: new Map(upstreams.map((u) => [u.name, u])) } as unknown as RuntimeConfig;
}
const keyed = (name: string, apiKey: string | undefined, baseUrl?: string): RuntimeUpstream => ({ ...upstream(name, baseUrl), apiKey });

t.test("a config swap that changes an upstream's key forgets that upstream's targets (every model, any base URL) and nothing else", async (t) => {
  const health = new TargetHealth({ failureThreshold: 2, baseCooldownMs: 60_000 });
  const a = keyed('a', 'sk-old');
  const b = keyed('b', 'sk-b');
  const before = configOf(a, b);
  const [a1, a2, aMoved, b1] = [
    { upstream: a, upstreamModel: 'm1', weight: 1 },
    { upstream: a, upstreamModel: 'm2', weight: 1 },
    { upstream: keyed('a', 'sk-old', 'http://127.0.0.1:10/moved/v1'), upstreamModel: 'm1', weight: 1 },
    { upstream: b, upstreamModel: 'm1', weight: 1 },
  ];
  for (const x of [a1, b1, aMoved]) {
    health.note(x, 'failed', 0);
    health.note(x, 'failed', 1);
    t.ok(health.isEjected(x));
  }
  health.note(a2, 'failed', 2);
  t.same(health.keysChanged(before, configOf(keyed('a', 'sk-old'), keyed('b', 'sk-b'))), [], 'a new snapshot with the same keys forgets nothing');
  t.ok(health.isEjected(a1));
  const after = configOf(keyed('a', 'sk-new'), keyed('b', 'sk-b'));
  t.same(health.keysChanged(before, after), [{ upstream: 'a', model: 'm1' }, { upstream: 'a', model: 'm1' }], "the ejected targets of a's, under either base URL");
  const a1New = { upstream: after.upstreams.get('a')!, upstreamModel: 'm1', weight: 1 };
  t.notOk(health.isEjected(a1New), 'the target with its new key is in its place');
  t.same(names(health.order([a1New, b1], 10)), ['a/m1', 'b/m1'], 'tried first, as its route puts it');
  t.equal(health.note({ upstream: after.upstreams.get('a')!, upstreamModel: 'm2', weight: 1 }, 'failed', 11), undefined, "m2's earlier failure was forgotten too: one failure, not two");
  t.ok(health.isEjected(b1), "b's key did not change: still ejected");
  t.ok(health.isEjected({ upstream: after.upstreams.get('b')!, upstreamModel: 'm1', weight: 1 }), 'in the new snapshot too');
});

t.test('a key set, removed or replaced is a change; an upstream that is gone is forgotten (not logged as back), a new one has nothing to forget', async (t) => {
  const health = new TargetHealth({ failureThreshold: 1 });
  const before = configOf(keyed('none', undefined), keyed('set', 'sk-1'), keyed('gone', 'sk-g'));
  for (const u of before.upstreams.values()) health.note({ upstream: u, upstreamModel: 'm', weight: 1 }, 'failed', 0);
  const restored = health.keysChanged(before, configOf(keyed('none', 'sk-now'), keyed('set', undefined), keyed('new', 'sk-n')));
  t.same(restored.map((x) => x.upstream).sort(), ['none', 'set']);
  t.notOk(health.isEjected({ upstream: keyed('gone', 'sk-g'), upstreamModel: 'm', weight: 1 }), 'an upstream the new config lacks is forgotten: added again later, it starts afresh');
});

t.test('replies to attempts made with the old key, still under way at the swap, are not noted; those with the new key are', async (t) => {
  const health = new TargetHealth({ failureThreshold: 2, baseCooldownMs: 60_000 });
  const before = configOf(keyed('a', 'sk-old'));
  const after = configOf(keyed('a', 'sk-new'));
  const old = { upstream: before.upstreams.get('a')!, upstreamModel: 'm', weight: 1 };
  const now = { upstream: after.upstreams.get('a')!, upstreamModel: 'm', weight: 1 };
  health.note(old, 'failed', 0);
  health.note(old, 'failed', 1);
  t.ok(health.isEjected(now));
  health.keysChanged(before, after);
  t.notOk(health.isEjected(now));
  for (let i = 0; i < 5; i += 1) t.equal(health.note(old, 'failed', 2 + i), undefined, `the old key refused again (${i + 1}): not counted`);
  t.notOk(health.isEjected(now), 'a burst of old-key refusals in flight does not eject the target again');
  health.note(now, 'failed', 10);
  t.equal(health.note(now, 'failed', 11), 'ejected', 'failures with the new key count as ever');
  // The first config swapped back in whole (its upstream objects served again): counted again.
  health.keysChanged(after, before);
  t.notOk(health.isEjected(old));
  health.note(old, 'failed', 20);
  t.equal(health.note(old, 'failed', 21), 'ejected', 'an upstream object served again is noted again');
});
