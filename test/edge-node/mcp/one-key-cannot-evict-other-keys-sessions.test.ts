// `initialize` is free, and the node keeps a bounded number of session bindings. Without a cap per
// key, one key opening sessions in a loop pushed every other key's sessions out of the table (their
// next call: 404 ZN_ERR_TOOL_SESSION_NOT_FOUND). Each key now keeps at most its own cap: past it,
// that key's own least recently used session goes, never another key's, in the memory store and in
// the SQLite file the replicas share. The caps here are small stand-ins for 1 000 and 50 000.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { Test } from 'tap';
import { MemorySessionOwnerStore } from '../../../edge-node/src/providers/mcp/session-owner-store.js';
import type { SessionOwnerStore } from '../../../edge-node/src/providers/mcp/session-owner-store.js';
import { SessionOwners } from '../../../edge-node/src/providers/mcp/session-owners.js';
import { SqliteSessionOwnerStore, TOUCH_EVERY_MS } from '../../../edge-node/src/providers/mcp/sqlite-session-owner-store.js';
import { bundleKey, newCallerKey } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import { ManualClock } from '../rate-limit/limit-fixtures.js';

const MAX = 10;
const MAX_PER_KEY = 3;

interface Stores {
  /** The store that binds, and a second one seeing the same bindings (a replica, for SQLite). */
  binder: SessionOwners;
  reader: SessionOwners;
  clock: ManualClock;
}

function memoryStores(): Stores {
  const clock = new ManualClock();
  const owners = new SessionOwners(new MemorySessionOwnerStore({ max: MAX, maxPerKey: MAX_PER_KEY, clock }));
  return { binder: owners, reader: owners, clock };
}

function sqliteStores(t: Test): Stores {
  const dir = t.testdir();
  const clock = new ManualClock();
  const open = (): SessionOwners => {
    const store: SessionOwnerStore = new SqliteSessionOwnerStore({ stateDir: dir, max: MAX, maxPerKey: MAX_PER_KEY, clock });
    t.teardown(() => store.close());
    return new SessionOwners(store);
  };
  return { binder: open(), reader: open(), clock };
}

for (const [name, make] of [['memory', memoryStores], ['SQLite', sqliteStores]] as const) {
  t.test(`${name} store: a key opening more sessions than its cap loses its own least recently used ones, never another key's`, async (t) => {
    const { binder, reader, clock } = make(t);
    t.equal(binder.bind('tools', 'b-1', 'key-b'), 'bound');
    clock.advance(1);
    t.equal(binder.bind('tools', 'b-2', 'key-b'), 'bound');
    for (let i = 1; i <= 4 * MAX; i += 1) {
      clock.advance(1);
      t.equal(binder.bind('tools', `a-${i}`, 'key-a'), 'bound', `key A's session ${i} is bound`);
    }
    t.equal(reader.admit('tools', 'b-1', 'key-b'), 'admitted', "key B's first session survives key A's flood");
    t.equal(reader.admit('tools', 'b-2', 'key-b'), 'admitted', "and so does its second");
    t.equal(reader.size, 2 + MAX_PER_KEY, 'key A keeps its cap of bindings, key B its two');
    for (let i = 4 * MAX - MAX_PER_KEY + 1; i <= 4 * MAX; i += 1) t.equal(reader.admit('tools', `a-${i}`, 'key-a'), 'admitted', `key A's recent session ${i} is kept`);
    t.equal(reader.admit('tools', `a-${4 * MAX - MAX_PER_KEY}`, 'key-a'), 'refused', "key A's older sessions went");
  });

  t.test(`${name} store: a key's session it keeps using is not the one its cap drops`, async (t) => {
    const { binder, reader, clock } = make(t);
    for (let i = 1; i <= MAX_PER_KEY; i += 1) {
      clock.advance(1);
      binder.bind('tools', `a-${i}`, 'key-a');
    }
    // The SQLite store records a use at most once a minute: use a-1 a minute later.
    clock.advance(TOUCH_EVERY_MS);
    t.equal(reader.admit('tools', 'a-1', 'key-a'), 'admitted');
    clock.advance(1);
    binder.bind('tools', 'a-new', 'key-a');
    t.equal(reader.admit('tools', 'a-1', 'key-a'), 'admitted', 'the session in use stays');
    t.equal(reader.admit('tools', 'a-2', 'key-a'), 'refused', 'the one used least recently went');
    t.equal(reader.admit('tools', 'a-new', 'key-a'), 'admitted');
  });
}

t.test('the global bound still holds past many keys each under their own cap', async (t) => {
  const clock = new ManualClock();
  const owners = new SessionOwners(new MemorySessionOwnerStore({ max: MAX, maxPerKey: MAX_PER_KEY, clock }));
  for (let k = 1; k <= 2 * MAX; k += 1) {
    clock.advance(1);
    owners.bind('tools', `s-${k}`, `key-${k}`);
  }
  t.equal(owners.size, MAX, 'never more than the node-wide max');
  t.equal(owners.admit('tools', 's-1', 'key-1'), 'refused', 'the least recently used went, as before');
});

/** A tool server that opens a new session per initialize and answers anything else with a result. */
async function newSessionPerInitialize(t: Test): Promise<string> {
  let opened = 0;
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
    req.on('end', () => {
      const message = JSON.parse(body) as { id?: number; method?: string };
      if (message.method === 'initialize') {
        opened += 1;
        res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': `session-${opened}` });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result: { protocolVersion: '2025-06-18', capabilities: {}, serverInfo: { name: 'many', version: '1' } } }));
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result: {} }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
}

t.test("through the node: key A opening sessions in a loop leaves key B's session working, and only A's oldest get 404", async (t) => {
  const toolServerUrl = await newSessionPerInitialize(t);
  const keyB = newCallerKey();
  const store = new SqliteSessionOwnerStore({ stateDir: t.testdir(), max: MAX, maxPerKey: MAX_PER_KEY });
  const node = await startPipelineNode(t, {
    upstreamUrl: 'http://127.0.0.1:9/v1',
    bundle: (base, keyHash) => ({
      apiKeys: [bundleKey('key-a', keyHash), bundleKey('key-b', keyB.sha256)],
      node: { ...base.node, surfaces: ['model', 'tools'] },
      toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: null, timeoutMs: 10_000, callMicros: 0 }],
    }),
    services: { sessionOwners: new SessionOwners(store) },
  });
  const url = `${node.origin}/mcp/tools`;
  const post = async (secret: string, message: Record<string, unknown>, session?: string): Promise<{ status: number; session: string | null; body: string }> => {
    const res = await fetch(url, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${secret}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        ...(session === undefined ? {} : { 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' }),
      },
      body: JSON.stringify(message),
    });
    return { status: res.status, session: res.headers.get('mcp-session-id'), body: await res.text() };
  };
  const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };
  const ping = { jsonrpc: '2.0', id: 2, method: 'ping' };

  const b = await post(keyB.secret, initialize);
  t.equal(b.status, 200);
  t.ok(b.session);
  const aSessions: string[] = [];
  for (let i = 0; i < 2 * MAX; i += 1) {
    const a = await post(node.secret, initialize);
    t.equal(a.status, 200, `key A's initialize ${i + 1} is answered (a well-behaved client is never locked out)`);
    aSessions.push(a.session!);
  }
  t.equal((await post(keyB.secret, ping, b.session!)).status, 200, "key B's session still works");
  t.equal((await post(node.secret, ping, aSessions.at(-1))).status, 200, "key A's newest session works");
  const oldest = await post(node.secret, ping, aSessions[0]);
  t.equal(oldest.status, 404, "key A's oldest session was dropped");
  t.match(JSON.parse(oldest.body), { error: { code: 'ZN_ERR_TOOL_SESSION_NOT_FOUND' } });
  t.equal(store.size(), 1 + MAX_PER_KEY);
});
