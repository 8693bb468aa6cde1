// An open MCP GET event stream does not outlive what admitted it: the key, the tools surface and the
// tool server are checked when the request arrives, and the stream (which may stay open for hours)
// is re-checked against every new config and on a timer (get-stream-standing.ts). A revoked key's
// stream ends promptly after the swap, its tool server GET aborted and its record written; so does
// one whose surface is taken off the node, whose key's allowedToolServers no longer name its server,
// or whose tool server is deleted; an expiresAt passing ends it on the next re-check; a swap that
// leaves all of them standing leaves the stream alone. A node's stop (app.close) ends open streams
// at once, cleanly, rather than waiting on a push channel. A config that changes the output rules
// of the key's guardrail policy ends it cleanly too, so its client reconnects under the new rules.
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import t from 'tap';
import type { Test } from 'tap';
import type { ConfigBundle, GuardrailPolicy, RequestRecord } from '../../proto/src/index.js';
import { buildApp } from '../../edge-node/src/app.js';
import type { GetStreamStandingOptions } from '../../edge-node/src/providers/mcp/get-stream-standing.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import type { OpenRow, RequestSpool } from '../../edge-node/src/spool/request-spool.js';
import { waitFor } from '../fixtures/wait-for.js';
import { recordingMetrics } from './pipeline/pipeline-harness.js';
import type { FinishedRequest } from './pipeline/pipeline-harness.js';
import { ACCOUNT_ID, bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { postInitialize, startOneSessionToolServer } from './mcp-get-stream-fixtures.js';

const TOOL_KEY = 'mcp-tool-server-key-for-tests-0042';
const SESSION = 'sess-standing-0001';
const caller = newCallerKey();
const other = newCallerKey();
const auth = { authorization: `Bearer ${caller.secret}` };

/** A tool server that opens a session on POST and pushes a notification every 40 ms on its GET stream. */
interface PushingToolServer {
  url: string;
  /** GET streams opened, and how many the node has closed (aborted) since. */
  gets: { opened: number; closed: number };
}

async function startPushingToolServer(t: Test): Promise<PushingToolServer> {
  const gets = { opened: 0, closed: 0 };
  let pushed = 0;
  const url = await startOneSessionToolServer(t, SESSION, (res) => {
    gets.opened += 1;
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const timer = setInterval(() => {
      pushed += 1;
      res.write(`event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"push #${pushed}"}}\n\n`);
    }, 40);
    res.on('close', () => {
      clearInterval(timer);
      gets.closed += 1;
    });
  });
  return { url, gets };
}

type BundleKeyOverrides = Parameters<typeof bundleKey>[2];

/** What a config offers besides the keys: the tools surface and the tool server (both by default). */
interface ConfigShape {
  toolsSurface?: boolean;
  toolServer?: boolean;
  guardrailPolicies?: GuardrailPolicy[];
}

interface Node {
  app: FastifyInstance;
  url: string;
  holder: ConfigHolder;
  records: RequestRecord[];
  finished: FinishedRequest[];
  /** A config of `version` for the same tool server, the caller's key with `overrides`. */
  config(version: number, overrides?: BundleKeyOverrides, accountStatus?: 'active' | 'suspended', shape?: ConfigShape): ReturnType<typeof fromBundle>;
}

async function startNode(t: Test, toolServerUrl: string, opts: { key?: BundleKeyOverrides; standing?: GetStreamStandingOptions; shape?: ConfigShape } = {}): Promise<Node> {
  const bundleOf = (version: number, overrides: BundleKeyOverrides = {}, accountStatus: 'active' | 'suspended' = 'active', shape: ConfigShape = {}): ConfigBundle => testBundle({
    nodeId: 'node-mcp', version, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-mcp', caller.sha256, overrides), bundleKey('key-other', other.sha256)],
    accounts: [{ id: ACCOUNT_ID, name: 'acme', status: accountStatus, limits: {} }],
    node: { surfaces: shape.toolsSurface === false ? ['model'] : ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: shape.toolServer === false ? [] : [{ name: 'tools', url: toolServerUrl, apiKey: TOOL_KEY, timeoutMs: 5_000, callMicros: 0 }],
    guardrailPolicies: shape.guardrailPolicies ?? [],
  });
  const holder = ConfigHolder.ready(fromBundle(bundleOf(5, opts.key, 'active', opts.shape)));
  const records: RequestRecord[] = [];
  const spool: RequestSpool = { open: (_row: OpenRow) => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const finished: FinishedRequest[] = [];
  const app = await buildApp({
    holder,
    logger: createLogger({ level: 'silent' }),
    services: { nodeId: 'node-mcp', spool, metrics: recordingMetrics(finished) },
    ...(opts.standing !== undefined ? { getStreamStanding: opts.standing } : {}),
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => {
    // A stream a failed test left open would hold close() until it ends.
    app.server.closeAllConnections();
    return app.close();
  });
  return {
    app,
    url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`,
    holder,
    records,
    finished,
    config: (version, overrides, accountStatus, shape) => fromBundle(bundleOf(version, overrides, accountStatus, shape)),
  };
}

/** An open GET stream read as it comes: its text so far, and whether (and how) it ended. */
interface OpenStream {
  requestId: string;
  text(): string;
  pushes(): number;
  ended(): 'done' | 'error' | undefined;
}

async function openGetStream(t: Test, url: string): Promise<OpenStream> {
  const init = await postInitialize(url, auth);
  t.equal(init.status, 200, 'initialize is answered');
  t.equal(init.headers.get('mcp-session-id'), SESSION);
  await init.text();
  const stop = new AbortController();
  t.teardown(() => stop.abort());
  const get = await fetch(url, { headers: { ...auth, accept: 'text/event-stream', 'mcp-session-id': SESSION, 'mcp-protocol-version': '2025-06-18' }, signal: stop.signal });
  t.equal(get.status, 200, 'the GET stream opens');
  const reader = get.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  let ended: 'done' | 'error' | undefined;
  void (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) {
          ended = 'done';
          return;
        }
        text += decoder.decode(value, { stream: true });
      }
    } catch {
      ended = 'error';
    }
  })();
  return {
    requestId: get.headers.get('x-request-id') ?? '',
    text: () => text,
    pushes: () => (text.match(/push #/g) ?? []).length,
    ended: () => ended,
  };
}

/** A request with the caller's key, now (the node's answer to a new request). */
async function toolsList(url: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { ...auth, 'mcp-session-id': SESSION, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }),
  });
  return { status: res.status, body: await res.json() };
}

t.test('revoking the key ends its open GET stream at the swap: tool server GET aborted, record written', async (t) => {
  const tool = await startPushingToolServer(t);
  const node = await startNode(t, tool.url);
  const stream = await openGetStream(t, node.url);
  await waitFor(() => stream.pushes() >= 2, { what: 'pushes relayed on the GET stream' });

  node.holder.swap(node.config(6, { status: 'revoked' }));
  const how = await waitFor(() => stream.ended(), { timeoutMs: 5_000, what: 'the GET stream of the revoked key to end' });
  t.ok(how, `the caller's stream ended (${how})`);
  await waitFor(() => tool.gets.closed === 1, { timeoutMs: 5_000, what: "the tool server's GET to be aborted" });
  t.equal(tool.gets.opened, 1);

  const record = await waitFor(() => node.records.find((r) => r.requestId === stream.requestId), { timeoutMs: 5_000, what: 'the record of the GET stream' });
  t.match(record, { status: 'failed', errorCode: 'ZN_ERR_API_KEY_REVOKED' }, 'the record says the key was revoked');
  const finished = await waitFor(() => node.finished.find((f) => f.requestId === stream.requestId), { what: 'the GET request to finish' });
  t.ok(['meter', 'settle', 'spool'].every((stage) => finished.stages.includes(stage)), 'the always-stages ran');

  // No more pushes reach the caller after its stream ended.
  const seen = stream.pushes();
  const later = await toolsList(node.url);
  t.equal(later.status, 401, 'a new request of the key is refused');
  t.match(later.body, { error: { code: 'ZN_ERR_API_KEY_REVOKED' } });
  t.equal(stream.pushes(), seen, 'nothing more was relayed');
});

t.test("a key's expiresAt passing while it streams ends the GET stream at the periodic re-check", async (t) => {
  const tool = await startPushingToolServer(t);
  // The key expires in an hour; the re-check's clock is moved past that by hand.
  const expiresAtMs = Date.now() + 3_600_000;
  let now = Date.now();
  const node = await startNode(t, tool.url, { key: { expiresAt: new Date(expiresAtMs).toISOString() }, standing: { intervalMs: 20, now: () => now } });
  const stream = await openGetStream(t, node.url);
  // Several re-checks run while the key is still valid: the stream stays open.
  await waitFor(() => stream.pushes() >= 4, { what: 'pushes relayed before the key expires' });
  t.equal(stream.ended(), undefined, 'a key in good standing keeps its stream');

  now = expiresAtMs + 1;
  await waitFor(() => stream.ended(), { timeoutMs: 5_000, what: 'the GET stream of the expired key to end' });
  await waitFor(() => tool.gets.closed === 1, { timeoutMs: 5_000, what: "the tool server's GET to be aborted" });
  const record = await waitFor(() => node.records.find((r) => r.requestId === stream.requestId), { timeoutMs: 5_000, what: 'the record of the GET stream' });
  t.match(record, { status: 'failed', errorCode: 'ZN_ERR_API_KEY_EXPIRED' });
});

t.test('a swap that leaves the key in good standing keeps the stream; a later one that suspends its account ends it', async (t) => {
  const tool = await startPushingToolServer(t);
  const node = await startNode(t, tool.url);
  const stream = await openGetStream(t, node.url);
  await waitFor(() => stream.pushes() >= 1, { what: 'a push relayed on the GET stream' });

  // Another key revoked, this one's limits changed: it still stands.
  node.holder.swap(fromBundle(testBundle({
    nodeId: 'node-mcp', version: 6, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-mcp', caller.sha256, { limits: { requestsPerMinute: 1000 } }), bundleKey('key-other', other.sha256, { status: 'revoked' })],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: tool.url, apiKey: TOOL_KEY, timeoutMs: 5_000, callMicros: 0 }],
  })));
  const atSwap = stream.pushes();
  await waitFor(() => stream.pushes() >= atSwap + 4, { what: 'pushes relayed after a swap that keeps the key' });
  t.equal(stream.ended(), undefined, 'the stream is still open');
  t.equal(tool.gets.closed, 0, "the tool server's GET is still open");
  t.equal(node.records.find((r) => r.requestId === stream.requestId), undefined, 'no record yet: the request goes on');

  // The stream is still watched: its account suspended ends it.
  node.holder.swap(node.config(7, {}, 'suspended'));
  await waitFor(() => stream.ended(), { timeoutMs: 5_000, what: 'the GET stream of the suspended account to end' });
  await waitFor(() => tool.gets.closed === 1, { timeoutMs: 5_000, what: "the tool server's GET to be aborted" });
  const record = await waitFor(() => node.records.find((r) => r.requestId === stream.requestId), { timeoutMs: 5_000, what: 'the record of the GET stream' });
  t.match(record, { status: 'failed', errorCode: 'ZN_ERR_ACCOUNT_SUSPENDED' });
});

for (const { change, shape, status, code } of [
  { change: 'takes the tools surface off the node', shape: { toolsSurface: false }, status: 403, code: 'ZN_ERR_SURFACE_DISABLED' },
  { change: 'deletes the tool server', shape: { toolServer: false }, status: 404, code: 'ZN_ERR_TOOL_SERVER_NOT_FOUND' },
] as const) {
  t.test(`a config that ${change} ends its open GET streams with ${code}, as a new request is refused`, async (t) => {
    const tool = await startPushingToolServer(t);
    const node = await startNode(t, tool.url, { standing: { intervalMs: 20 } });
    const stream = await openGetStream(t, node.url);
    await waitFor(() => stream.pushes() >= 2, { what: 'pushes relayed on the GET stream' });

    // The key still stands: only what the stream reaches is gone.
    node.holder.swap(node.config(6, {}, 'active', shape));
    const later = await toolsList(node.url);
    t.equal(later.status, status, 'a new request of the key is refused');
    t.match(later.body, { error: { code } });
    await waitFor(() => stream.ended(), { timeoutMs: 5_000, what: 'the open GET stream to end' });
    await waitFor(() => tool.gets.closed === 1, { timeoutMs: 5_000, what: "the tool server's GET to be aborted" });
    t.equal(tool.gets.opened, 1);
    const record = await waitFor(() => node.records.find((r) => r.requestId === stream.requestId), { timeoutMs: 5_000, what: 'the record of the GET stream' });
    t.match(record, { status: 'failed', errorCode: code }, 'the record says why the node ended it');

    // Once it ended, nothing more reaches the caller.
    const seen = stream.pushes();
    const finished = await waitFor(() => node.finished.find((f) => f.requestId === stream.requestId), { what: 'the GET request to finish' });
    t.ok(finished, 'the GET request finished');
    t.equal(stream.pushes(), seen, 'nothing more was relayed');
  });
}

t.test("a config that narrows the key's allowedToolServers keeps its GET stream while they still name its server, and ends it with ZN_ERR_TOOL_SERVER_NOT_ALLOWED once they do not", async (t) => {
  const tool = await startPushingToolServer(t);
  const node = await startNode(t, tool.url, { key: { allowedToolServers: ['tools', 'mail'] } });
  const stream = await openGetStream(t, node.url);
  await waitFor(() => stream.pushes() >= 2, { what: 'pushes relayed on the GET stream' });

  // Narrowed, but its server is still on the list: the stream goes on.
  node.holder.swap(node.config(6, { allowedToolServers: ['tools'] }));
  const atSwap = stream.pushes();
  await waitFor(() => stream.pushes() >= atSwap + 4, { what: 'pushes relayed after a swap that keeps the server on the list' });
  t.equal(stream.ended(), undefined, 'the stream is still open');
  t.equal(tool.gets.closed, 0, "the tool server's GET is still open");

  // Narrowed past its server: the key still stands, only this tool server is no longer its to use.
  node.holder.swap(node.config(7, { allowedToolServers: ['mail'] }));
  const later = await toolsList(node.url);
  t.equal(later.status, 403, 'a new request of the key is refused');
  t.match(later.body, { error: { code: 'ZN_ERR_TOOL_SERVER_NOT_ALLOWED', message: /tool server "tools"/ } });
  await waitFor(() => stream.ended(), { timeoutMs: 5_000, what: 'the open GET stream to end' });
  await waitFor(() => tool.gets.closed === 1, { timeoutMs: 5_000, what: "the tool server's GET to be aborted" });
  t.equal(tool.gets.opened, 1);
  const record = await waitFor(() => node.records.find((r) => r.requestId === stream.requestId), { timeoutMs: 5_000, what: 'the record of the GET stream' });
  t.match(record, { status: 'failed', errorCode: 'ZN_ERR_TOOL_SERVER_NOT_ALLOWED' }, 'the record says why the node ended it');
  const seen = stream.pushes();
  await waitFor(() => node.finished.find((f) => f.requestId === stream.requestId), { what: 'the GET request to finish' });
  t.equal(stream.pushes(), seen, 'nothing more was relayed');
});

t.test("the node's stop ends its open GET streams at once: the caller's stream ends cleanly, the tool server's GET is aborted, the record says the node stopped", async (t) => {
  const tool = await startPushingToolServer(t);
  const node = await startNode(t, tool.url);
  const stream = await openGetStream(t, node.url);
  await waitFor(() => stream.pushes() >= 2, { what: 'pushes relayed on the GET stream' });

  // What serve runs on SIGTERM; its deadline (SHUTDOWN_DEADLINE_MS, 10 s) would cut the stream.
  let closed = false;
  void node.app.close().then(() => (closed = true));
  await waitFor(() => closed, { timeoutMs: 5_000, what: 'app.close() to finish with a GET stream open' });
  t.equal(await waitFor(() => stream.ended(), { timeoutMs: 5_000, what: "the caller's stream to end" }), 'done', "the caller's stream ended cleanly (its MCP client reconnects)");
  await waitFor(() => tool.gets.closed === 1, { timeoutMs: 5_000, what: "the tool server's GET to be aborted" });
  const record = node.records.find((r) => r.requestId === stream.requestId);
  t.match(record, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_NODE_STOPPING' }, "the record was written before the stop finished and says the node's stop ended it");
});

t.test("a config that changes the output rules of the key's guardrail policy ends its GET stream cleanly; the stream the client opens again is checked by the new rules", async (t) => {
  const tool = await startPushingToolServer(t);
  const policy = (rules: GuardrailPolicy['rules']): ConfigShape => ({ guardrailPolicies: [{ id: 'p', name: 'p', rules }] });
  const inputOnly: GuardrailPolicy['rules'] = [{ detector: 'keywords', keywords: ['forbidden'], action: 'block', on: 'input' }];
  const node = await startNode(t, tool.url, { key: { guardrailPolicyId: 'p' }, shape: policy(inputOnly) });
  const stream = await openGetStream(t, node.url);
  await waitFor(() => stream.pushes() >= 2, { what: 'pushes relayed on the GET stream' });

  // Input rules changed only: a GET stream has no input, it goes on.
  node.holder.swap(node.config(6, { guardrailPolicyId: 'p' }, 'active', policy([...inputOnly, { detector: 'email', action: 'mask', on: 'input' }])));
  const atSwap = stream.pushes();
  await waitFor(() => stream.pushes() >= atSwap + 4, { what: 'pushes relayed after a swap that changes input rules only' });
  t.equal(stream.ended(), undefined, 'the stream is still open');
  t.equal(tool.gets.closed, 0, "the tool server's GET is still open");

  // An output rule added: the stream ends cleanly and the record says why.
  const masking = policy([...inputOnly, { detector: 'keywords', keywords: ['push'], action: 'mask', on: 'output' }]);
  node.holder.swap(node.config(7, { guardrailPolicyId: 'p' }, 'active', masking));
  t.equal(await waitFor(() => stream.ended(), { timeoutMs: 5_000, what: 'the GET stream to end' }), 'done', "the caller's stream ended cleanly (its MCP client reconnects)");
  await waitFor(() => tool.gets.closed === 1, { timeoutMs: 5_000, what: "the tool server's GET to be aborted" });
  const record = await waitFor(() => node.records.find((r) => r.requestId === stream.requestId), { timeoutMs: 5_000, what: 'the record of the GET stream' });
  t.match(record, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_GUARDRAIL_POLICY_CHANGED' }, 'the record says the rules changed');

  // Reconnected: the pushes reach it masked, and the same config again leaves it alone.
  const again = await openGetStream(t, node.url);
  await waitFor(() => (again.text().match(/notifications\/message/g) ?? []).length >= 3, { what: 'pushes relayed on the new GET stream' });
  t.equal(again.pushes(), 0, 'the new stream is checked by the new output rule');
  node.holder.swap(node.config(8, { guardrailPolicyId: 'p' }, 'active', masking));
  const seen = (again.text().match(/notifications\/message/g) ?? []).length;
  await waitFor(() => (again.text().match(/notifications\/message/g) ?? []).length >= seen + 3, { what: 'pushes relayed after a swap with the same rules' });
  t.equal(again.ended(), undefined, 'a swap with the same rules keeps the stream');
});
