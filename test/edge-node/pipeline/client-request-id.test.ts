// A caller's own request id (x-client-request-id or x-request-id) is echoed and recorded, but the
// request's id, which keys its record and its charge, is always the node's: a caller repeating an
// id (an SDK retry, a fixed trace id, another tenant's id) cannot make two requests one record.
import path from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import type { RequestRecord } from '../../../proto/src/index.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { quietLogger, tempStateDir } from '../spool/spool-helpers.js';
import { startPipelineNode } from './pipeline-harness.js';

const MINTED = /^req_[0-9A-HJKMNP-TV-Z]{26}$/;

function spooledRecords(file: string): RequestRecord[] {
  const db = new Database(file, { readonly: true });
  try {
    return (db.prepare('select record_json from records order by sequence').pluck().all() as string[]).map((j) => JSON.parse(j) as RequestRecord);
  } finally {
    db.close();
  }
}

t.test('three requests sent with one x-request-id are three records, each under its own minted id', async (t) => {
  const upstream = await startFakeUpstream(t);
  const file = path.join(tempStateDir(t), 'spool.db');
  const spool = new SpoolStore({ file, meta: createSpoolFile(file, 'node-1'), logger: quietLogger(), limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }) });
  t.teardown(() => spool.close());
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { spool } });
  const ids: Array<string | null> = [];
  const echoed: Array<string | null> = [];
  for (let i = 0; i < 3; i++) {
    const { response } = await node
      .client()
      .chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: `call ${i}` }] }, { headers: { 'x-request-id': 'my-trace-id' } })
      .withResponse();
    ids.push(response.headers.get('x-request-id'));
    echoed.push(response.headers.get('x-client-request-id'));
  }
  t.equal(new Set(ids).size, 3, 'each answer carries its own request id');
  for (const id of ids) t.match(id, MINTED, 'minted by the node');
  t.same(echoed, ['my-trace-id', 'my-trace-id', 'my-trace-id'], "the caller's id comes back as x-client-request-id");
  t.same(upstream.requests.slice(-3).map((r) => r.headers['x-request-id']), ids, 'the upstream sees the minted ids');
  const records = spooledRecords(file);
  t.equal(records.length, 3, 'no request is dropped as a duplicate of another');
  t.same(records.map((r) => r.requestId), ids);
  t.same(records.map((r) => r.clientRequestId), ['my-trace-id', 'my-trace-id', 'my-trace-id'], "each record keeps the caller's id");
  const logged = node.logs().filter((l) => l.msg === 'request finished' && l.clientRequestId === 'my-trace-id');
  t.same(logged.map((l) => l.requestId), ids, "the log lines carry both ids");
});

t.test("x-client-request-id is the caller's id when both headers are sent; a request without either records none", async (t) => {
  const upstream = await startFakeUpstream(t);
  const file = path.join(tempStateDir(t), 'spool.db');
  const spool = new SpoolStore({ file, meta: createSpoolFile(file, 'node-1'), logger: quietLogger(), limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }) });
  t.teardown(() => spool.close());
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { spool } });
  const both = await node
    .client()
    .chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'a' }] }, { headers: { 'x-client-request-id': 'mine-1', 'x-request-id': 'proxy-1' } })
    .withResponse();
  t.equal(both.response.headers.get('x-client-request-id'), 'mine-1');
  const none = await node.client().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'b' }] }).withResponse();
  t.equal(none.response.headers.get('x-client-request-id'), null, 'nothing to echo');
  const bad = await node
    .client()
    .chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'c' }] }, { headers: { 'x-request-id': 'has spaces in it' } })
    .withResponse();
  t.equal(bad.response.headers.get('x-client-request-id'), null, 'a malformed id is neither echoed nor recorded');
  const records = spooledRecords(file);
  t.same(records.map((r) => r.clientRequestId), ['mine-1', undefined, undefined]);
});

t.test("x-client-request-id is echoed on answers fastify gives before the request's hooks run (a path that cannot be decoded)", async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  for (const url of ['/v1/models/%zz', `/mcp/${'s'.repeat(101)}`]) {
    const res = await fetch(node.origin + url, { headers: { authorization: `Bearer ${node.secret}`, 'x-client-request-id': 'trace-9' } });
    t.equal(res.status, 400, url);
    t.equal(res.headers.get('x-client-request-id'), 'trace-9', `${url.slice(0, 20)}: echoed`);
    t.match(res.headers.get('x-request-id'), MINTED);
  }
});
