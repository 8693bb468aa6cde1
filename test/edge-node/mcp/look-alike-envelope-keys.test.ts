// A JSON-RPC message's fields are read by the node by their exact names (`method` decides the
// charge, the initialize-alone rule and the record's label; `id` matches answers to requests), while
// a tool server may read them ignoring case: Go's encoding/json (mark3labs/mcp-go, older go-sdk)
// matches `Method` (and `ſ` for s, `K` for k) to `method`, the last key winning. A message with
// such a look-alike key would be billed as one method and run as another (a ping that is a
// tools/call, charged nothing), so it is refused before the tool server sees it.
import type http from 'node:http';
import t from 'tap';
import { misspeltEnvelopeField } from '../../../edge-node/src/providers/mcp/jsonrpc-message.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { CALL_MICROS, rawToolServer, startPricedToolNode } from './priced-tool-node.js';
import type { PricedToolNode } from './priced-tool-node.js';

/** A key as Go's encoding/json folds it to match a field: ASCII upper case, `ſ` as S, the Kelvin sign as K. */
function goFold(key: string): string {
  return key.replaceAll('\u017f', 's').replaceAll('\u212a', 'k').toUpperCase();
}

/** A message read as a Go tool server reads it: each field from the last key that folds to its name. */
function readAsGo(message: Record<string, unknown>): { method?: unknown; id?: unknown; params?: unknown } {
  const read: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(message)) read[goFold(key)] = value;
  return { method: read.METHOD, id: read.ID, params: read.PARAMS };
}

/**
 * A tool server that decodes each POSTed message (or batch) as Go's encoding/json does and runs the
 * tools/call it reads; `ran` lists the tools it ran.
 */
async function foldingToolServer(t: Parameters<typeof rawToolServer>[0]): Promise<{ url: string; bodies: string[]; ran: string[] }> {
  const ran: string[] = [];
  const server = await rawToolServer(t, (_req: http.IncomingMessage, res: http.ServerResponse, body: string) => {
    const post = JSON.parse(body) as Record<string, unknown> | Array<Record<string, unknown>>;
    const answers = (Array.isArray(post) ? post : [post]).map((message) => {
      const { method, id, params } = readAsGo(message);
      if (method === 'tools/call') ran.push(String((params as { name?: unknown } | undefined)?.name));
      return { jsonrpc: '2.0', id: id ?? null, result: { content: [{ type: 'text', text: `ran ${String(method)}` }] } };
    });
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(Array.isArray(post) ? answers : answers[0]));
  });
  return { ...server, ran };
}

function postText(node: PricedToolNode, body: string): Promise<{ status: number; body: { error?: { code?: string; message?: string } } }> {
  return fetch(node.url, {
    method: 'POST',
    headers: { ...node.auth, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body,
  }).then(async (res) => ({ status: res.status, body: (await res.json()) as { error?: { code?: string; message?: string } } }));
}

const DELETE_REPO = '{"name":"delete_repo","arguments":{"repo":"prod"}}';

t.test('a message with a second method key spelt in another case is refused with 400 before the tool server, which would have run it as a tools/call charged nothing', async (t) => {
  const tool = await foldingToolServer(t);
  const node = await startPricedToolNode(t, tool.url);
  const smuggled: Array<[string, string]> = [
    ['Method', `{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call","params":${DELETE_REPO}}`],
    ['METHOD', `{"jsonrpc":"2.0","id":1,"method":"ping","METHOD":"tools/call","params":${DELETE_REPO}}`],
    // A client's response (no method at all, so it costs nothing) that Go reads as a call.
    ['mEthod', `{"jsonrpc":"2.0","id":1,"result":{},"mEthod":"tools/call","params":${DELETE_REPO}}`],
    // Go's fold of ſ (U+017F) is s: the tools/call the node charged goes with other params.
    ['param\u017f', `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"},"param\u017f":${DELETE_REPO}}`],
  ];
  for (const [key, body] of smuggled) {
    const res = await postText(node, body);
    t.equal(res.status, 400, `${key}: refused`);
    t.equal(res.body.error?.code, 'ZN_ERR_INVALID_REQUEST', `${key}: as an invalid request`);
    t.ok(res.body.error?.message?.includes(JSON.stringify(key)), `${key}: the message names the key`);
  }
  t.same(tool.bodies, [], 'the tool server got none of them');
  t.same(tool.ran, [], 'and ran no tool');
  await waitFor(() => node.records.length === smuggled.length, { what: 'the refusals recorded' });
  t.equal(node.lease().spent, 0, 'nothing was charged, nothing ran');
});

t.test('a batch cannot hide initialize from the initialize-alone rule behind a look-alike method key', async (t) => {
  const tool = await foldingToolServer(t);
  const node = await startPricedToolNode(t, tool.url);
  const batch = `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":${DELETE_REPO}},{"jsonrpc":"2.0","id":2,"method":"ping","METHOD":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}]`;
  const res = await postText(node, batch);
  t.equal(res.status, 400);
  t.equal(res.body.error?.code, 'ZN_ERR_INVALID_REQUEST');
  t.match(res.body.error?.message, /"METHOD" \(message 2 of the batch\)/, 'the message says which message of the batch');
  t.same(tool.bodies, [], 'never sent');
});

t.test('keys that only resemble the envelope (other names, any key inside params) still go to the tool server as written, and a tools/call is charged', async (t) => {
  const tool = await foldingToolServer(t);
  const node = await startPricedToolNode(t, tool.url);
  const body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","Name":"echo","ARGUMENTS":{},"_META":{}},"methods":"x","Meta":{},"identity":1}';
  const res = await postText(node, body);
  t.equal(res.status, 200);
  t.same(tool.bodies, [body], 'relayed as written');
  t.same(tool.ran, ['echo']);
  await waitFor(() => node.records.length === 1 && node.lease().reserved === 0, { what: 'the record and the reservation settled' });
  t.equal(node.lease().spent, CALL_MICROS);
});

t.test('every key that reads as a JSON-RPC field under case folding is found, in a message or a batch, and no other', async (t) => {
  const lookAlikes: Array<[string, string]> = [
    ['Method', 'method'], ['METHOD', 'method'], ['ID', 'id'], ['Id', 'id'], ['iD', 'id'], ['JSONRPC', 'jsonrpc'], ['JsonRpc', 'jsonrpc'],
    ['Params', 'params'], ['param\u017f', 'params'], ['PARAM\u017f', 'params'], ['Result', 'result'], ['re\u017fult', 'result'], ['ERROR', 'error'],
    // .NET's OrdinalIgnoreCase reads dotless ı as I; Java's Turkish lower case reads İ as i.
    ['\u0131d', 'id'], ['\u0130D', 'id'],
  ];
  for (const [key, field] of lookAlikes) {
    t.same(misspeltEnvelopeField({ jsonrpc: '2.0', id: 1, method: 'ping', [key]: 'x' }), { key, field }, key);
  }
  t.same(misspeltEnvelopeField([{ jsonrpc: '2.0', id: 1, method: 'ping' }, { jsonrpc: '2.0', id: 2, result: {}, Error: {} }]), { key: 'Error', field: 'error', index: 1 }, 'in a batch, with its place');
  for (const key of ['method', 'methods', 'meth', 'Meta', '_meta', 'identity', 'i d', 'rpc', 'jsonrpc2', '\u212aey', 'M\u0435thod']) {
    t.equal(misspeltEnvelopeField({ jsonrpc: '2.0', id: 1, method: 'ping', [key]: 'x' }), undefined, `${key}: not a look-alike`);
  }
});
