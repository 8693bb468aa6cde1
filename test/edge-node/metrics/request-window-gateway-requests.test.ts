// The heartbeat's requests5m / errorRate5m count the callers' gateway requests (the /v1 model surface
// and the /mcp tools surface). They counted every answer on the caller port: a load balancer
// polling /readyz showed as steady traffic, and a node without a config, answering it 503, showed up
// to 100 % errors though no caller request failed; 404s for unknown paths counted too.
import t from 'tap';
import { buildApp } from '../../../edge-node/src/app.js';
import { ConfigHolder } from '../../../edge-node/src/config/config-holder.js';
import { fromLocalConfig } from '../../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../../edge-node/src/logger.js';
import { RequestWindow } from '../../../edge-node/src/metrics/request-window.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { CALLER_KEY, listenOnLoopback, testConfig } from '../node-harness.js';

async function nodeWithWindow(t: { teardown(fn: () => unknown): void }, holder: ConfigHolder) {
  const logLines: string[] = [];
  const logger = createLogger({ level: 'info', destination: { write: (line: string) => void logLines.push(line) } });
  const requestWindow = new RequestWindow();
  const app = await buildApp({ holder, logger, requestWindow });
  const { origin } = await listenOnLoopback(t, app);
  // The window is fed in the same 'close' listener that writes the "request finished" line.
  const finished = () => logLines.filter((line) => (JSON.parse(line) as { msg?: string }).msg === 'request finished').length;
  const allFinished = (count: number) => waitFor(() => finished() === count, { what: `${count} "request finished" lines` });
  return { origin, requestWindow, allFinished };
}

const chat = { model: 'echo', messages: [{ role: 'user', content: 'hi' }] };
const withKey = { authorization: `Bearer ${CALLER_KEY}`, 'content-type': 'application/json' };

t.test('health and readiness probes and 404s for unknown paths are not counted in the heartbeat figures; gateway requests are', async (t) => {
  const upstream = await startFakeUpstream(t);
  const { origin, requestWindow, allFinished } = await nodeWithWindow(t, ConfigHolder.ready(fromLocalConfig(testConfig(upstream.url))));

  const probes = [
    await fetch(`${origin}/healthz`),
    await fetch(`${origin}/readyz`),
    await fetch(`${origin}/nothing-here`),
    await fetch(`${origin}/v1/no-such-api`, { method: 'POST', headers: withKey, body: JSON.stringify(chat) }),
    // A route's path with another method is no route either.
    await fetch(`${origin}/v1/chat/completions`, { headers: withKey }),
  ];
  t.same(probes.map((r) => r.status), [200, 200, 404, 404, 404]);
  await allFinished(probes.length);
  t.same(requestWindow.figures(), { requests: 0, errors: 0 }, 'none counted');

  const calls = [
    await fetch(`${origin}/v1/chat/completions`, { method: 'POST', headers: withKey, body: JSON.stringify(chat) }),
    await fetch(`${origin}/v1/models`, { headers: withKey }),
    await fetch(`${origin}/v1/models/echo`, { headers: withKey }),
    // Refused before the pipeline (no key) and on the tools surface: still callers' requests.
    await fetch(`${origin}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(chat) }),
    await fetch(`${origin}/mcp/no-such-server`, { method: 'POST', headers: withKey, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }) }),
  ];
  for (const r of calls) await r.arrayBuffer();
  t.same(calls.map((r) => r.status < 500), [true, true, true, true, true], 'answered without a server-side failure');
  t.same(calls.slice(0, 3).map((r) => r.status), [200, 200, 200]);
  await allFinished(probes.length + calls.length);
  t.same(requestWindow.figures(), { requests: calls.length, errors: 0 }, 'each gateway request counted once');
});

t.test("a node without a config shows no errors for its 503s to /readyz, only for callers' requests it could not serve", async (t) => {
  const { origin, requestWindow, allFinished } = await nodeWithWindow(t, ConfigHolder.notReady('no config yet'));

  const polls = [await fetch(`${origin}/readyz`), await fetch(`${origin}/readyz`), await fetch(`${origin}/healthz`)];
  t.same(polls.map((r) => r.status), [503, 503, 200]);
  await allFinished(polls.length);
  t.same(requestWindow.figures(), { requests: 0, errors: 0 }, 'a load balancer polling is no traffic and no error');

  const call = await fetch(`${origin}/v1/chat/completions`, { method: 'POST', headers: withKey, body: JSON.stringify(chat) });
  await call.arrayBuffer();
  t.equal(call.status, 503, 'the caller was not served');
  await allFinished(polls.length + 1);
  t.same(requestWindow.figures(), { requests: 1, errors: 1 }, "the caller's failed request counts as an error");
});
