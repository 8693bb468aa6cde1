// A target ejected because its upstream refused the node's key (401) is tried in its place again as
// soon as a config swap changes that upstream's key, instead of the fallback serving until the
// cooldown is over; a target of another upstream, whose key did not change, stays ejected.
import OpenAI from 'openai';
import t from 'tap';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { TargetHealth } from '../../../edge-node/src/routing/target-health.js';
import type { ConfigBundle } from '../../../proto/src/index.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from '../config-fixtures.js';
import { listenOnLoopback } from '../node-harness.js';

t.test("a config swap that changes an upstream's key puts its ejected target back at once; other ejections stay", async (t) => {
  const primary = await startFakeUpstream(t);
  const other = await startFakeUpstream(t);
  const backup = await startFakeUpstream(t);
  const key = newCallerKey();
  const base = testBundle({ nodeId: 'node-1', version: 1, upstreamUrl: primary.url, keys: [bundleKey('key-a', key.sha256)] });
  const route = (alias: string, upstream: string) => ({
    alias,
    targets: [{ upstream, model: 'demo-echo', weight: 1 }],
    fallbacks: [{ upstream: 'backup', model: 'demo-echo' }],
    timeoutMs: 30_000,
    retries: 0,
  });
  const bundle: ConfigBundle = {
    ...base,
    upstreams: [
      ...base.upstreams,
      { id: 'up-o', name: 'other', kind: 'openai-compatible', baseUrl: other.url, apiKey: 'sk-other-0123456789', timeoutMs: 30_000 },
      { id: 'up-b', name: 'backup', kind: 'openai-compatible', baseUrl: backup.url, apiKey: 'sk-backup-0123456789', timeoutMs: 30_000 },
    ],
    routes: [route('fb', 'demo'), route('other-fb', 'other')],
  };
  const holder = ConfigHolder.ready(fromBundle(bundle));
  const logLines: string[] = [];
  const finished: Array<{ requestId: string; attempts: string[] }> = [];
  const app = await buildApp({
    holder,
    logger: createLogger({ level: 'debug', destination: { write: (line: string) => void logLines.push(line) } }),
    services: {
      // A cooldown far longer than the test: only the key change can put the target back.
      targetHealth: new TargetHealth({ failureThreshold: 2, baseCooldownMs: 600_000 }),
      metrics: { requestFinished: (ctx) => void finished.push({ requestId: ctx.requestId, attempts: ctx.attempts.map((a) => `${a.upstream}:${a.outcome}`) }) },
    },
  });
  const { baseURL } = await listenOnLoopback(t, app);
  const client = new OpenAI({ baseURL, apiKey: key.secret, maxRetries: 0, timeout: 20_000 });
  const attemptsOf = async (model: string) => {
    const { response } = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] }).withResponse();
    const id = response.headers.get('x-request-id');
    return (await waitFor(() => finished.find((f) => f.requestId === id), { what: 'the request to finish' })).attempts;
  };

  // The primary refuses the node's key twice (a bad key), the other upstream fails twice: both ejected.
  primary.setBehaviour({ failNext: { count: 2, status: 401 } });
  other.setBehaviour({ failNext: { count: 2, status: 503 } });
  for (let i = 0; i < 2; i += 1) {
    t.same(await attemptsOf('fb'), ['demo:status', 'backup:ok'], `refused key ${i + 1}: fell back`);
    t.same(await attemptsOf('other-fb'), ['other:status', 'backup:ok'], `other failure ${i + 1}: fell back`);
  }
  t.same(await attemptsOf('fb'), ['backup:ok'], 'the primary is ejected: the fallback serves');
  t.same(await attemptsOf('other-fb'), ['backup:ok'], 'so is the other upstream');

  // The operator's fix: a config push with a new key for the primary's upstream (and nothing else changed).
  const primaryBefore = primary.requests.length;
  holder.swap(fromBundle({
    ...bundle,
    version: 2,
    upstreams: bundle.upstreams.map((u) => (u.name === 'demo' ? { ...u, apiKey: 'sk-rotated-0123456789' } : u)),
  }));
  t.same(await attemptsOf('fb'), ['demo:ok'], 'the primary is tried in its place at once, with its new key');
  t.equal(primary.requests.length, primaryBefore + 1, 'one call to the primary');
  t.equal(primary.requests.at(-1)?.headers.authorization, 'Bearer sk-rotated-0123456789', 'made with the new key');
  t.same(await attemptsOf('other-fb'), ['backup:ok'], "the other upstream's key did not change: still ejected");
  const logs = logLines.map((line) => JSON.parse(line) as Record<string, unknown>);
  t.match(logs.find((l) => l.msg === "upstream target's key changed; back in its place"), { level: 30, upstream: 'demo', model: 'demo-echo' });
  t.notOk(logLines.join('\n').includes('sk-rotated-0123456789'), 'the key is in no log line');

  // A push that changes something else (here: only the version) keeps the other ejection too.
  holder.swap(fromBundle({ ...bundle, version: 3, upstreams: bundle.upstreams.map((u) => (u.name === 'demo' ? { ...u, apiKey: 'sk-rotated-0123456789' } : u)) }));
  t.same(await attemptsOf('other-fb'), ['backup:ok'], 'still ejected after a push that changed no key of it');
});
