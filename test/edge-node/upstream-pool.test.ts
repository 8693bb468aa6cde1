// The upstream pool is shared per origin: one upstream's settings must not limit another's.
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { waitFor } from '../fixtures/wait-for.js';
import { sdkError, startPipelineNode } from './pipeline/pipeline-harness.js';

t.test('an upstream sharing its origin with a quicker-timing-out upstream keeps its own, longer connect time', async (t) => {
  // A TLS origin that accepts TCP but never answers the handshake: the connect never completes.
  const sockets = new Set<net.Socket>();
  const silent = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => {
    for (const socket of sockets) socket.destroy();
    silent.close(() => resolve());
  }));
  const baseUrl = `https://127.0.0.1:${(silent.address() as AddressInfo).port}/v1`;
  const route = (alias: string, upstream: string) => ({ alias, targets: [{ upstream, model: 'm', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 });
  const node = await startPipelineNode(t, {
    upstreamUrl: baseUrl,
    bundle: () => ({
      upstreams: [
        { id: 'up-q', name: 'quick', kind: 'openai-compatible', baseUrl, apiKey: 'sk-quick-000000000000', timeoutMs: 200 },
        { id: 'up-p', name: 'patient', kind: 'openai-compatible', baseUrl, apiKey: 'sk-patient-0000000000', timeoutMs: 5_000 },
      ],
      routes: [route('quick', 'quick'), route('patient', 'patient')],
    }),
  });
  const ask = (model: string) => node.client().chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] });
  const attemptOf = async (model: string) => {
    const err = await sdkError(ask(model));
    t.equal(err.code, 'ZN_ERR_UPSTREAM_TIMEOUT');
    const done = await waitFor(() => node.finished.find((f) => f.requestId === err.headers?.get('x-request-id')), { what: 'the finished request' });
    return done.attempts[0]!;
  };
  // The quick upstream opens the origin's pool first.
  // Bounded by the patient upstream's timeout, not by 200 ms plus a guess at this machine's load: what
  // is checked is whose timeout applied (the patient one's is checked from below). The patient one's
  // 5 s leaves 20 times the quick one's 200 ms for a loaded CI host.
  const quick = await attemptOf('quick');
  t.ok(quick.durationMs < 4_000, `the quick upstream gives up after its own 200 ms, not the patient one's 5 s (waited ${Math.round(quick.durationMs)} ms)`);
  const patient = await attemptOf('patient');
  t.equal(patient.outcome, 'timeout');
  t.ok(patient.durationMs >= 4_900, `the patient upstream waited its own 5 s for the connect (waited ${Math.round(patient.durationMs)} ms)`);
});
