// How the node delivers a tool server's event-stream answer to a POST: the head at once, every event
// as soon as it is complete (a server request such as an elicitation must reach the client while the
// tool server waits for the reply), and only the event completing the POST held until the request's
// record is committed (docs/spool.md), with or without output guardrails.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { Test } from 'tap';
import type { ConfigBundle, GuardrailPolicy, RequestRecord } from '../../proto/src/index.js';
import { buildApp } from '../../edge-node/src/app.js';
import { ConfigHolder } from '../../edge-node/src/config/config-holder.js';
import { fromBundle } from '../../edge-node/src/config/runtime-config.js';
import { createLogger } from '../../edge-node/src/logger.js';
import type { RequestSpool } from '../../edge-node/src/spool/request-spool.js';
import { waitFor } from '../fixtures/wait-for.js';
import { bundleKey, newCallerKey, testBundle } from './config-fixtures.js';
import { policy } from './guardrails/guardrail-fixtures.js';

const caller = newCallerKey();
/** How long the scripted tool server waits for the test's go-ahead before it carries on anyway. */
const GIVE_UP_MS = 3000;

/** A spool whose finalise resolves only when the test opens the gate. */
function gatedSpool(): RequestSpool & { records: RequestRecord[]; open_(): void } {
  const records: RequestRecord[] = [];
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  return {
    records,
    open: () => undefined,
    finalise: async (record) => {
      records.push(record);
      await gate;
    },
    keepsBodies: () => true,
    fullness: () => 0,
    open_: () => release(),
  };
}

function openSpool(): RequestSpool {
  return { open: () => undefined, finalise: async () => undefined, keepsBodies: () => true, fullness: () => 0 };
}

async function startNode(t: Test, toolServerUrl: string, spool: RequestSpool, rules?: GuardrailPolicy['rules']): Promise<string> {
  const bundle: ConfigBundle = testBundle({
    nodeId: 'node-mcp', version: 5, upstreamUrl: 'http://127.0.0.1:9/v1',
    keys: [bundleKey('key-mcp', caller.sha256, rules === undefined ? {} : { guardrailPolicyId: 'p' })],
    node: { surfaces: ['model', 'tools'], spool: { quotaBytes: 1 << 20, fullPolicy: 'reject' } },
    toolServers: [{ name: 'tools', url: toolServerUrl, apiKey: 'tool-key', timeoutMs: 10_000, callMicros: 0 }],
    ...(rules === undefined ? {} : { guardrailPolicies: [policy('p', rules)] }),
  });
  const app = await buildApp({ holder: ConfigHolder.ready(fromBundle(bundle)), logger: createLogger({ level: 'silent' }), services: { nodeId: bundle.nodeId, spool } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/mcp/tools`;
}

/** A tool server answering every POST with `script` (it writes the event stream itself). */
async function scriptedToolServer(t: Test, script: (res: http.ServerResponse) => Promise<void>): Promise<string> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => void script(res));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
}

/** A promise the test resolves, or that resolves by itself after GIVE_UP_MS (so a failing test ends). */
function signal(): { wait: Promise<void>; give: () => void } {
  let give!: () => void;
  const wait = new Promise<void>((resolve) => {
    give = resolve;
    setTimeout(resolve, GIVE_UP_MS).unref();
  });
  return { wait, give };
}

function event(message: unknown): string {
  return `event: message\ndata: ${JSON.stringify(message)}\n\n`;
}

const elicit = { jsonrpc: '2.0', id: 0, method: 'elicitation/create', params: { message: 'which one?', requestedSchema: { type: 'object', properties: {} } } };
const call = (id: number) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'ask', arguments: {} } });
const answer = (id: number) => ({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: `answer ${id}` }] } });

function postStream(url: string, body: unknown): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { authorization: `Bearer ${caller.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: JSON.stringify(body) });
}

/** Reads the body until `until` is in what was read; the text read so far. */
async function readUntil(reader: ReadableStreamDefaultReader<Uint8Array>, until: string, sofar = ''): Promise<string> {
  const decoder = new TextDecoder();
  let text = sofar;
  while (!text.includes(until)) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  return text;
}

for (const guarded of [false, true]) {
  const how = guarded ? ' (output guardrails on)' : '';
  t.test(`a server request on a POST's event stream reaches the caller while the tool server waits for its reply${how}`, async (t) => {
    const replied = signal();
    let answered = false;
    const url = await scriptedToolServer(t, async (res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(event(elicit));
      await replied.wait;
      answered = true;
      res.end(event(answer(1)));
    });
    const origin = await startNode(t, url, openSpool(), guarded ? [{ detector: 'email', action: 'mask', on: 'output' }] : undefined);
    const res = await postStream(origin, call(1));
    t.equal(res.headers.get('x-accel-buffering'), 'no', 'a buffering proxy in front is told to pass events on');
    const reader = res.body!.getReader();
    const first = await readUntil(reader, 'elicitation/create');
    t.match(first, 'elicitation/create', 'the elicitation reached the caller');
    t.notOk(answered, 'it did so before the tool server answered the call (it waits for the reply)');
    replied.give();
    t.match(await readUntil(reader, 'answer 1', first), 'answer 1', 'then the answer came');
  });
}

t.test("the caller gets an event stream's head before its first event", async (t) => {
  const headSeen = signal();
  let wrote = false;
  const url = await scriptedToolServer(t, async (res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    await headSeen.wait;
    wrote = true;
    res.end(event(answer(1)));
  });
  const origin = await startNode(t, url, openSpool());
  const res = await postStream(origin, call(1));
  t.notOk(wrote, 'the status line and headers came before the tool server wrote an event');
  headSeen.give();
  t.match(await res.text(), 'answer 1');
});

t.test('only the event answering the last request of a POST waits for the record; the answers before it do not', async (t) => {
  const firstSeen = signal();
  let secondSent = false;
  const url = await scriptedToolServer(t, async (res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(event({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 1, progress: 1 } }));
    res.write(event(answer(1)));
    await firstSeen.wait;
    secondSent = true;
    res.end(event(answer(2)));
  });
  const spool = gatedSpool();
  const origin = await startNode(t, url, spool);
  const res = await postStream(origin, [call(1), call(2)]);
  const reader = res.body!.getReader();
  const early = await readUntil(reader, 'answer 1');
  t.match(early, 'notifications/progress', 'the progress notification came at once');
  t.match(early, 'answer 1', 'so did the answer to the first request of the batch');
  t.notOk(secondSent, 'before the tool server sent the last answer');
  firstSeen.give();
  await waitFor(() => spool.records.length === 1, { what: 'the record to be finalised' });
  const pending = reader.read().then((r) => new TextDecoder().decode(r.value));
  const early2 = await Promise.race([pending, new Promise<undefined>((resolve) => setTimeout(resolve, 300, undefined))]);
  t.equal(early2, undefined, 'the last answer is held while the record is not committed');
  spool.open_();
  t.match(await pending, 'answer 2', 'and sent once it is');
  const { done } = await reader.read();
  t.ok(done, 'the stream then ends');
});

t.test('an event split across chunks is sent whole, and a CRLF stream is cut at its blank lines', async (t) => {
  const url = await scriptedToolServer(t, async (res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const text = event(elicit).replace(/\n/g, '\r\n') + event(answer(1)).replace(/\n/g, '\r\n');
    for (let i = 0; i < text.length; i += 7) {
      res.write(text.slice(i, i + 7));
      await new Promise((resolve) => setImmediate(resolve));
    }
    res.end();
  });
  const origin = await startNode(t, url, openSpool());
  const res = await postStream(origin, call(1));
  const text = await res.text();
  t.equal(text, event(elicit).replace(/\n/g, '\r\n') + event(answer(1)).replace(/\n/g, '\r\n'), 'byte for byte');
});

/**
 * A tool server that answers on a POST's event stream and then keeps writing (notifications of
 * `noteBytes` every few ms, none when 0) until the node closes the stream or GIVE_UP_MS pass.
 */
async function lingeringToolServer(t: Test, noteBytes: number): Promise<{ url: string; closedByNode: Promise<boolean>; sentAfter: () => number }> {
  let sentAfter = 0;
  let settle!: (byNode: boolean) => void;
  const closedByNode = new Promise<boolean>((resolve) => (settle = resolve));
  const url = await scriptedToolServer(t, async (res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(event(answer(1)));
    const note = event({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'x'.repeat(noteBytes) } });
    const timer = noteBytes > 0 ? setInterval(() => {
      sentAfter += note.length;
      res.write(note);
    }, 5) : undefined;
    const giveUp = setTimeout(() => {
      clearInterval(timer);
      settle(false);
      res.end();
    }, GIVE_UP_MS);
    res.once('close', () => {
      clearInterval(timer);
      clearTimeout(giveUp);
      settle(true);
    });
  });
  return { url, closedByNode, sentAfter: () => sentAfter };
}

t.test('a tool server that keeps writing after the answer of a POST neither holds the answer back nor has the node hold what it writes', async (t) => {
  const tool = await lingeringToolServer(t, 64 * 1024);
  const spool = gatedSpool();
  spool.open_();
  const origin = await startNode(t, tool.url, spool);
  const res = await postStream(origin, call(1));
  const text = await res.text();
  t.match(text, 'answer 1', 'the caller got its answer');
  t.ok(await tool.closedByNode, "and the end of its stream, the node having closed the tool server's stream (it never ends it by itself in time)");
  t.equal(spool.records.length, 1, 'the record was written');
  t.ok(tool.sentAfter() > 0, 'the tool server wrote after the answer');
  t.ok(text.length <= event(answer(1)).length + 256 * 1024, `what the node held after the answer is bounded (${text.length} bytes delivered, ${tool.sentAfter()} written)`);
});

for (const guarded of [false, true]) {
  const how = guarded ? ' (output guardrails on)' : '';
  t.test(`a tool server that leaves the event stream of a POST open after its answer is closed after a short grace${how}`, async (t) => {
    const tool = await lingeringToolServer(t, 0);
    const origin = await startNode(t, tool.url, openSpool(), guarded ? [{ detector: 'email', action: 'mask', on: 'output' }] : undefined);
    const res = await postStream(origin, call(1));
    t.equal(await res.text(), event(answer(1)), 'the caller got its answer, then the end of its stream');
    t.ok(await tool.closedByNode, "the node closed the tool server's stream (it would have kept it open for longer)");
  });
}
