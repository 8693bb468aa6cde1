// The installer's readiness wait against a real HTTP /readyz: a node whose spool is full answers
// 503 ZN_ERR_SPOOL_FULL (so load balancers send callers elsewhere) but has started, with its config
// loaded; an upgrade must not be switched back for it. Any other 503 is still not ready.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { readyzUrl, waitForReadiness } from '../../installer/src/install/readiness-wait.js';
import { fakeServices } from './fake-host.js';

async function readyz(t: { teardown(fn: () => unknown): void }, status: number, body: unknown): Promise<number> {
  const server = http.createServer((_req, res) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body)));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return (server.address() as AddressInfo).port;
}

function services(t: { teardown(fn: () => unknown): void }) {
  const root = mkdtempSync(join(tmpdir(), 'zenova-readyz-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  return fakeServices(root);
}

const linkUp = { controlPlane: { connected: true, disconnectedSince: null } };

t.test('a full spool\'s 503 with its config loaded and the link up counts as started for an upgrade', async (t) => {
  const port = await readyz(t, 503, { ready: false, code: 'ZN_ERR_SPOOL_FULL', reason: 'spool full', configVersion: 7, ...linkUp });
  const outcome = await waitForReadiness({ url: readyzUrl({ host: '127.0.0.1', port }), unit: 'node-edge.service', services: services(t), timeoutMs: 1_000, controlLink: true });
  t.same(outcome, { ready: true });
});

t.test('a full spool with the link down, or a 503 for anything else, is still not ready', async (t) => {
  const linkDown = await readyz(t, 503, { ready: false, code: 'ZN_ERR_SPOOL_FULL', configVersion: 7, controlPlane: { connected: false, disconnectedSince: new Date().toISOString() } });
  const down = await waitForReadiness({ url: readyzUrl({ host: '127.0.0.1', port: linkDown }), unit: 'node-edge.service', services: services(t), timeoutMs: 600, controlLink: true });
  t.equal(down.ready, false);
  t.match(down.ready ? '' : down.reason, /control link is not up yet/);
  const noConfig = await readyz(t, 503, { ready: false, code: 'ZN_ERR_NODE_NOT_READY', reason: 'no config yet', configVersion: null, ...linkUp });
  const notReady = await waitForReadiness({ url: readyzUrl({ host: '127.0.0.1', port: noConfig }), unit: 'node-edge.service', services: services(t), timeoutMs: 600 });
  t.equal(notReady.ready, false);
  t.match(notReady.ready ? '' : notReady.reason, /no config yet/);
});
