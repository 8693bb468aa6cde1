// A tool server's `initialize` answer names the session it opened (Mcp-Session-Id), and the node
// binds that session to the caller's key before relaying the answer (session-owners.ts). When that
// answer never goes out — refused (an output guardrail's block, JSON in a charset the node cannot
// check), or its caller gone — nobody was given the id: its binding is dropped and the session
// ended at the tool server, rather than left bound to a key that never learnt it. A binding an
// answer that went out handed over is never dropped, also when a later initialize of the same key
// got the same id and was refused. Through a listening node and a scripted tool server.
import t from 'tap';
import type { Test } from 'tap';
import { MemorySessionOwnerStore } from '../../../edge-node/src/providers/mcp/session-owner-store.js';
import type { SessionOwnerStore } from '../../../edge-node/src/providers/mcp/session-owner-store.js';
import { SessionOwners } from '../../../edge-node/src/providers/mcp/session-owners.js';
import { SqliteSessionOwnerStore } from '../../../edge-node/src/providers/mcp/sqlite-session-owner-store.js';
import { ManualClock } from '../rate-limit/limit-fixtures.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { bundleKey } from '../config-fixtures.js';
import { policy } from '../guardrails/guardrail-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';
import { rawToolServer } from './priced-tool-node.js';

const EMAIL = 'zhang.san@example.com';
const INITIALIZE = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'test', version: '1' } } };
const PING = { jsonrpc: '2.0', id: 2, method: 'ping' };

/** How the scripted tool server answers each initialize, in turn. */
type InitAnswer = 'plain' | 'latin1' | 'email' | 'held';

interface Setup {
  node: PipelineNode;
  owners: SessionOwners;
  /** The session ids the tool server was asked to end (DELETE). */
  ended: string[];
  url: string;
}

/** A node whose key `key-a` blocks e-mail addresses in answers, before a tool server answering initializes as `script` says, all with session id `sess-1`. */
async function setup(t: Test, script: InitAnswer[]): Promise<Setup> {
  const ended: string[] = [];
  const tool = await rawToolServer(t, (req, res, body) => {
    const session = req.headers['mcp-session-id'];
    if (req.method === 'DELETE') {
      ended.push(String(session));
      res.writeHead(200).end();
      return;
    }
    const message = JSON.parse(body) as { id: number; method: string };
    if (message.method !== 'initialize') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result: {} }));
      return;
    }
    const how = script.shift() ?? 'plain';
    const result = { protocolVersion: '2025-06-18', capabilities: {}, serverInfo: { name: how === 'email' ? `support ${EMAIL}` : 'tools', version: '1' } };
    const contentType = how === 'latin1' ? 'application/json; charset=iso-8859-1' : 'application/json';
    if (how === 'held') {
      // The head (with the session id) now, the body never: the caller leaves meanwhile.
      res.writeHead(200, { 'content-type': contentType, 'mcp-session-id': 'sess-1' }).flushHeaders();
      return;
    }
    res.writeHead(200, { 'content-type': contentType, 'mcp-session-id': 'sess-1' }).end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result }));
  });
  const owners = new SessionOwners();
  const node = await startPipelineNode(t, {
    upstreamUrl: 'http://127.0.0.1:9/v1',
    bundle: (base, keyHash) => ({
      node: { ...base.node, surfaces: ['model', 'tools'] },
      apiKeys: [bundleKey('key-a', keyHash, { guardrailPolicyId: 'p' })],
      guardrailPolicies: [policy('p', [{ detector: 'email', action: 'block', on: 'output' }])],
      toolServers: [{ name: 'tools', url: tool.url, apiKey: null, timeoutMs: 10_000, callMicros: 0 }],
    }),
    services: { sessionOwners: owners },
  });
  return { node, owners, ended, url: `${node.origin}/mcp/tools` };
}

/** POSTs one message (with a session id when given) and waits until the node finished the request (its cleanups ran). */
async function post(s: Setup, body: unknown, sessionId?: string): Promise<{ status: number; sessionId: string | null; text: string }> {
  const before = s.node.finished.length;
  const res = await fetch(s.url, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${s.node.secret}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...(sessionId !== undefined ? { 'mcp-session-id': sessionId } : {}),
    },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  await waitFor(() => s.node.finished.length > before, { what: 'the node to finish the request' });
  return { status: res.status, sessionId: res.headers.get('mcp-session-id'), text };
}

t.test('an initialize whose answer an output guardrail blocks leaves its session unbound and ends it at the tool server', async (t) => {
  const s = await setup(t, ['email']);
  const init = await post(s, INITIALIZE);
  t.match(init.text, /ZN_ERR_GUARDRAIL_BLOCKED/, 'the answer is refused', { status: init.status, text: init.text });
  t.equal(init.sessionId, null, 'and its session id is not handed out');
  t.equal(s.owners.size, 0, 'nobody was given the id: it is bound to no key');
  t.equal((await post(s, PING, 'sess-1')).status, 404, 'so the id is refused, to the key that sent the initialize too');
  await waitFor(() => s.ended.length === 1, { what: 'the tool server to be asked to end the session' });
  t.same(s.ended, ['sess-1'], 'the session nobody can use is ended at the tool server');
});

t.test('an initialize whose answer the node cannot relay (JSON in a charset other than UTF-8) leaves its session unbound', async (t) => {
  const s = await setup(t, ['latin1']);
  const init = await post(s, INITIALIZE);
  t.equal(init.status, 502, 'the answer is refused');
  t.equal(init.sessionId, null);
  t.equal(s.owners.size, 0, 'its session is bound to no key');
  t.equal((await post(s, PING, 'sess-1')).status, 404);
  await waitFor(() => s.ended.length === 1, { what: 'the tool server to be asked to end the session' });
});

t.test('an initialize whose caller leaves before its answer leaves its session unbound', async (t) => {
  const s = await setup(t, ['held']);
  const gone = new AbortController();
  const call = fetch(s.url, {
    method: 'POST',
    signal: gone.signal,
    headers: { authorization: `Bearer ${s.node.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify(INITIALIZE),
  }).catch((err: unknown) => err);
  await waitFor(() => s.owners.size === 1, { what: 'the node to bind the session the tool server\'s head named' });
  gone.abort();
  t.ok((await call) instanceof Error, 'the caller got no answer');
  await waitFor(() => s.node.finished.length === 1, { what: 'the node to finish the request' });
  t.equal(s.owners.size, 0, 'its session is bound to no key');
  await waitFor(() => s.ended.length === 1, { what: 'the tool server to be asked to end the session' });
});

t.test('an initialize answer that goes out keeps its binding, also when a later initialize of the same key gets the same id and is refused', async (t) => {
  const s = await setup(t, ['plain', 'email']);
  const first = await post(s, INITIALIZE);
  t.equal(first.status, 200);
  t.equal(first.sessionId, 'sess-1', 'the id is handed out');
  t.equal((await post(s, PING, 'sess-1')).status, 200, 'and the key may use it');
  const again = await post(s, INITIALIZE);
  t.match(again.text, /ZN_ERR_GUARDRAIL_BLOCKED/, 'the second initialize is refused');
  t.equal(s.owners.size, 1, 'the binding the first answer handed out stays');
  t.equal((await post(s, PING, 'sess-1')).status, 200, 'the key that was given the id still uses its session');
  t.same(s.ended, [], 'and it is not ended at the tool server');
});

for (const kind of ['memory', 'sqlite'] as const) {
  t.test(`a binding made again by the same key before the first initialize's answer was refused is kept (${kind} store)`, async (t) => {
    const clock = new ManualClock();
    const store: SessionOwnerStore = kind === 'memory' ? new MemorySessionOwnerStore({ clock }) : new SqliteSessionOwnerStore({ stateDir: t.testdir(), clock });
    t.teardown(() => store.close());
    const owners = new SessionOwners(store);
    const refused = owners.bindOpened('tools', 'sess-1', 'key-a');
    t.ok(refused.madeAt !== undefined, 'the first initialize made the binding');
    t.same(owners.bindOpened('tools', 'sess-1', 'key-a'), { outcome: 'bound' }, 'a second one, in the same millisecond, found it made by its own key');
    t.notOk(owners.openedAnswerEnded('tools', 'sess-1', 'key-a', refused.madeAt!, false), 'the first one\'s refusal leaves it: the second may have handed the id out');
    t.equal(owners.admit('tools', 'sess-1', 'key-a'), 'admitted');

    const alone = owners.bindOpened('tools', 'sess-2', 'key-a');
    t.ok(owners.openedAnswerEnded('tools', 'sess-2', 'key-a', alone.madeAt!, false), 'one nothing bound again is dropped');
    t.equal(owners.admit('tools', 'sess-2', 'key-a'), 'refused');

    const delivered = owners.bindOpened('tools', 'sess-3', 'key-a');
    t.notOk(owners.openedAnswerEnded('tools', 'sess-3', 'key-a', delivered.madeAt!, true), 'one whose answer went out is kept');
    t.equal(owners.admit('tools', 'sess-3', 'key-a'), 'admitted');
  });
}

t.test('a binding another replica made again for the same key is kept when the first replica\'s answer is refused', async (t) => {
  const dir = t.testdir();
  const clock = new ManualClock();
  const stores = [new SqliteSessionOwnerStore({ stateDir: dir, clock }), new SqliteSessionOwnerStore({ stateDir: dir, clock })];
  t.teardown(() => stores.forEach((s) => s.close()));
  const [first, second] = stores.map((s) => new SessionOwners(s));
  const refused = first!.bindOpened('tools', 'sess-1', 'key-a');
  clock.advance(1);
  t.same(second!.bindOpened('tools', 'sess-1', 'key-a'), { outcome: 'bound' });
  t.notOk(first!.openedAnswerEnded('tools', 'sess-1', 'key-a', refused.madeAt!, false), 'its last use moved on: kept');
  t.equal(second!.admit('tools', 'sess-1', 'key-a'), 'admitted');
});
