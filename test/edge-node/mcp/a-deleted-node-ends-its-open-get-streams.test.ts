// An MCP GET event stream opened before the control plane deleted the node (NODE_DELETED over its
// control link: the lease book's deletion, by which every new request is refused 503
// ZN_ERR_NODE_DELETED) does not stay open relaying the tool server's pushes: the node ends it
// (get-stream-standing.ts), cleanly for the caller, its tool server GET aborted and its record
// finished as at any other end (`failed`, ZN_ERR_NODE_STOPPING: the node ended it). The caller's
// reconnect, and any new request, is refused ZN_ERR_NODE_DELETED.
// Real app, real lease store file and book, real tool server on loopback.
import { pino } from 'pino';
import t from 'tap';
import type { Test } from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import { CreditChannel } from '../../../edge-node/src/billing/credit-channel.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import type { OpenRow, RequestSpool } from '../../../edge-node/src/spool/request-spool.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { postInitialize, startOneSessionToolServer } from '../mcp-get-stream-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import { tempStateDir } from '../spool/spool-helpers.js';

const SESSION = 'sess-deleted-node-0001';
const deleted = { code: 'NODE_DELETED', message: 'node n1 was deleted', final: true };

/** A tool server whose GET stream pushes a notification every 40 ms until the node closes it. */
async function startPushingToolServer(t: Test): Promise<{ url: string; gets: { opened: number; closed: number } }> {
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

t.test('a node deleted while an MCP GET stream is open ends that stream cleanly, records it, and refuses the reconnect 503 ZN_ERR_NODE_DELETED', async (t) => {
  const tool = await startPushingToolServer(t);

  // The node's credit as serve opens it: a lease store file, its book, the channel the control link tells.
  const store = openLeaseStore(tempStateDir(t), { nodeId: 'n1', owner: 1 });
  t.teardown(() => store.close());
  const logger = pino({ level: 'silent' });
  const book = new LeaseBook(store, { logger });
  const channel = new CreditChannel(book, { reportIntervalMs: 60_000, logger });
  t.teardown(() => channel.stop());

  const records: RequestRecord[] = [];
  const spool: RequestSpool = { open: (_row: OpenRow) => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const node = await startPipelineNode(t, {
    upstreamUrl: 'http://127.0.0.1:9/v1',
    bundle: (base) => ({
      node: { ...base.node, surfaces: ['model', 'tools'] },
      toolServers: [{ name: 'tools', url: tool.url, apiKey: 'mcp-tool-server-key-for-tests-0042', timeoutMs: 5_000, callMicros: 0 }],
    }),
    services: { spool, credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, logger) },
  });
  t.teardown(() => node.app.server.closeAllConnections());
  const url = `${node.origin}/mcp/tools`;
  const auth = { authorization: `Bearer ${node.secret}` };
  const getStream = (signal?: AbortSignal): Promise<Response> =>
    fetch(url, { headers: { ...auth, accept: 'text/event-stream', 'mcp-session-id': SESSION, 'mcp-protocol-version': '2025-06-18' }, ...(signal !== undefined ? { signal } : {}) });

  const init = await postInitialize(url, auth);
  t.equal(init.status, 200, 'initialize is answered before the deletion');
  await init.text();
  const stop = new AbortController();
  t.teardown(() => stop.abort());
  const get = await getStream(stop.signal);
  t.equal(get.status, 200, 'the GET stream opens');
  const requestId = get.headers.get('x-request-id');
  let text = '';
  let ended: 'done' | 'error' | undefined;
  void (async () => {
    const decoder = new TextDecoder();
    try {
      for await (const chunk of get.body!) text += decoder.decode(chunk, { stream: true });
      ended = 'done';
    } catch {
      ended = 'error';
    }
  })();
  const pushes = (): number => (text.match(/push #/g) ?? []).length;
  await waitFor(() => pushes() >= 2, { what: 'pushes relayed on the GET stream' });

  channel.onCutOff(deleted);
  t.equal(book.deletion()?.code, 'NODE_DELETED', 'the node knows it is deleted');

  const how = await waitFor(() => ended, { timeoutMs: 10_000, what: 'the open GET stream of the deleted node to end' });
  t.equal(how, 'done', 'it ended cleanly for the caller (no cut-off body)');
  await waitFor(() => tool.gets.closed === 1, { timeoutMs: 5_000, what: "the tool server's GET to be aborted" });
  t.equal(tool.gets.opened, 1);
  const record = await waitFor(() => records.find((r) => r.requestId === requestId), { timeoutMs: 5_000, what: 'the record of the GET stream' });
  t.match(record, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_NODE_STOPPING' }, 'its record is finished: the node ended it');
  const finished = await waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: 'the GET request to finish' });
  t.ok(['meter', 'settle', 'spool'].every((stage) => finished.stages.includes(stage)), 'the always-stages ran');
  const seen = pushes();

  // The caller's MCP client reconnects, and sends other requests: every one is refused.
  const again = await getStream();
  t.equal(again.status, 503, 'the reconnecting GET is refused');
  t.match(await again.json(), { error: { code: 'ZN_ERR_NODE_DELETED' } });
  const post = await postInitialize(url, auth);
  t.equal(post.status, 503, 'a new initialize is refused');
  t.match(await post.json(), { error: { code: 'ZN_ERR_NODE_DELETED' } });
  t.equal(tool.gets.opened, 1, 'no new GET reached the tool server');
  t.equal(pushes(), seen, 'nothing more was relayed to the caller');
});
