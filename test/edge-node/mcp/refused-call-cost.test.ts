// A tools/call the tool server refuses at the HTTP level is not served: a 4xx is relayed as it came
// (MCP clients act on a 404's lost session and a 429's wait) but costs nothing and is recorded
// failed with the tool server's status, as an upstream 4xx on a model request; a redirect is never
// followed nor passed on (a 502). A 200 whose calls failed in JSON-RPC is an answer: charged.
import t from 'tap';
import { waitFor } from '../../fixtures/wait-for.js';
import { CALL_MICROS, postTo, rawToolServer, startPricedToolNode, toolCall } from './priced-tool-node.js';
import type { PricedToolNode } from './priced-tool-node.js';

const JSON_RPC_ERROR = JSON.stringify({ jsonrpc: '2.0', id: 1, error: { code: -32000, message: 'refused' } });

async function settled(node: PricedToolNode, records: number): Promise<void> {
  await waitFor(() => node.records.length === records && node.lease().reserved === 0, { what: `${records} record(s) and the reservation settled` });
}

const refusals = [
  { status: 400, contentType: 'application/json', body: JSON_RPC_ERROR },
  { status: 404, contentType: 'application/json', body: JSON_RPC_ERROR },
  { status: 404, contentType: 'text/plain', body: 'Session not found' },
  { status: 429, contentType: 'application/json', body: JSON_RPC_ERROR },
];

for (const refusal of refusals) {
  t.test(`a tools/call the tool server refuses with HTTP ${refusal.status} (${refusal.contentType}) is relayed as it came, costs nothing and is recorded failed`, async (t) => {
    const tool = await rawToolServer(t, (_req, res) => {
      res.writeHead(refusal.status, { 'content-type': refusal.contentType, 'retry-after': '7' }).end(refusal.body);
    });
    const node = await startPricedToolNode(t, tool.url);
    const res = await postTo(node, toolCall(1));
    t.equal(res.status, refusal.status, "the tool server's status reaches the client");
    t.equal(res.headers.get('retry-after'), '7');
    t.equal(await res.text(), refusal.body, 'with its body');
    await settled(node, 1);
    t.match(node.records[0], {
      status: 'failed', httpStatus: refusal.status, errorCode: 'ZN_ERR_UPSTREAM_ERROR', upstream: null,
      cost: { reservedMicros: CALL_MICROS, costMicros: 0 },
      attempts: [{ upstream: 'tools', model: 'tools/call', outcome: 'status', httpStatus: refusal.status }],
    });
    t.equal(node.lease().spent, 0, 'the lease is charged nothing');
  });
}

for (const status of [301, 302, 307, 308]) {
  t.test(`a tool server answering a tools/call with a ${status} redirect is a 502 ZN_ERR_UPSTREAM_ERROR, never followed nor passed on, and costs nothing`, async (t) => {
    const tool = await rawToolServer(t, (req, res) => {
      if (req.url === '/elsewhere') res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [] } }));
      else res.writeHead(status, { location: '/elsewhere', 'content-type': 'application/json' }).end(JSON_RPC_ERROR);
    });
    const node = await startPricedToolNode(t, tool.url);
    const res = await postTo(node, toolCall(1));
    t.equal(res.status, 502);
    t.equal(res.headers.get('location'), null, 'the redirect is not passed on');
    const body = (await res.json()) as { error: { code: string; message: string } };
    t.equal(body.error.code, 'ZN_ERR_UPSTREAM_ERROR');
    t.match(body.error.message, /redirect/);
    await settled(node, 1);
    t.equal(tool.bodies.length, 1, 'the node did not follow it');
    t.match(node.records[0], {
      status: 'failed', httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_ERROR', upstream: null,
      cost: { costMicros: 0 }, attempts: [{ outcome: 'status', httpStatus: status }],
    });
    t.equal(node.lease().spent, 0);
  });
}

t.test('a batch answered 200 with a JSON-RPC error for every call costs each call; the same batch refused with HTTP 429 costs nothing', async (t) => {
  let refuse = false;
  const tool = await rawToolServer(t, (_req, res, body) => {
    const ids = (JSON.parse(body) as Array<{ id: number }>).map((m) => m.id);
    const answer = JSON.stringify(ids.map((id) => ({ jsonrpc: '2.0', id, error: { code: -32602, message: 'no such tool' } })));
    res.writeHead(refuse ? 429 : 200, { 'content-type': 'application/json' }).end(answer);
  });
  const node = await startPricedToolNode(t, tool.url);
  const batch = [toolCall(1), toolCall(2), toolCall(3)];

  const answered = await postTo(node, batch);
  t.equal(answered.status, 200);
  await answered.text();
  await settled(node, 1);
  t.match(node.records[0], { status: 'ok', httpStatus: 200, errorCode: null, cost: { costMicros: 3 * CALL_MICROS } });
  t.equal(node.lease().spent, 3 * CALL_MICROS, 'an answer is charged for its calls, whatever they returned');

  refuse = true;
  const refused = await postTo(node, batch);
  t.equal(refused.status, 429);
  await refused.text();
  await settled(node, 2);
  t.match(node.records[1], { status: 'failed', httpStatus: 429, errorCode: 'ZN_ERR_UPSTREAM_ERROR', cost: { reservedMicros: 3 * CALL_MICROS, costMicros: 0 } });
  t.equal(node.lease().spent, 3 * CALL_MICROS, 'the refused batch added nothing');
});

t.test("a tool server's 405 to GET or DELETE (no event stream, no session end) is relayed and recorded ok: routine MCP, not a failure", async (t) => {
  const tool = await rawToolServer(t, (req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'session-405' });
    res.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { protocolVersion: '2025-06-18', capabilities: {}, serverInfo: { name: 'plain', version: '1' } } }));
  });
  const node = await startPricedToolNode(t, tool.url);
  const init = await postTo(node, { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'test', version: '1' } } });
  t.equal(init.status, 200);
  const session = init.headers.get('mcp-session-id');
  t.equal(session, 'session-405');
  await init.text();
  for (const method of ['GET', 'DELETE']) {
    const res = await fetch(node.url, { method, headers: { ...node.auth, accept: 'text/event-stream', 'mcp-session-id': session! } });
    t.equal(res.status, 405, `${method} is relayed as the tool server answered`);
    await res.text();
  }
  await settled(node, 3);
  const byMethod = new Map(node.records.map((r) => [r.attempts[0]?.model, r]));
  for (const method of ['GET', 'DELETE']) {
    t.match(byMethod.get(method), { status: 'ok', httpStatus: 405, errorCode: null, cost: { costMicros: 0 } }, `${method} recorded ok`);
  }
});
