// A node the control plane deleted (NODE_DELETED over its control link: the credit withdrawal kept in
// credit-leases.sqlite) refuses every caller request on its Base URL — chat, messages, embeddings,
// models, MCP, priced or not, with a key or without — with 503 ZN_ERR_NODE_DELETED, in the identify
// stage, from the lease book's memory; it writes no record for them (never deliverable). Every
// replica on the state dir follows the link holder (at its next lease report), a restart refuses at
// once, and a session established again (a re-enrollment) makes every one serve again. A credential
// refused for good (CREDENTIAL_REVOKED) only withdraws the credit: unpriced requests are served.
// Real app, real lease store files, real spool file, fake upstream.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { pino } from 'pino';
import t from 'tap';
import type { Test } from 'tap';
import { CreditChannel } from '../../../edge-node/src/billing/credit-channel.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { errorTable } from '../../../edge-node/src/errors.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import { identifyStage } from '../../../edge-node/src/pipeline/stages/identify.js';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { quietLogger, tempStateDir } from '../spool/spool-helpers.js';
import { startPipelineNode } from './pipeline-harness.js';

const deleted = { code: 'NODE_DELETED', message: 'node n1 was deleted', final: true };
const revoked = { code: 'CREDENTIAL_REVOKED', message: "the node's credentials were revoked", final: false };

/** One replica's credit on a shared state dir: its own lease store connection, book and channel. */
interface Replica {
  book: LeaseBook;
  credit: LeaseCredit;
  channel: CreditChannel;
}

function stateDir(t: Test): (opts?: { reportIntervalMs?: number }) => Replica {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-deleted-node-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  let owner = 0;
  return (opts = {}) => {
    const store = openLeaseStore(dir, { nodeId: 'n1', owner: ++owner });
    t.teardown(() => store.close());
    const logger = pino({ level: 'silent' });
    const book = new LeaseBook(store, { logger });
    const channel = new CreditChannel(book, { reportIntervalMs: opts.reportIntervalMs ?? 60_000, logger });
    t.teardown(() => channel.stop());
    return { book, credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, logger), channel };
  };
}

interface Answer {
  status: number;
  code: string | undefined;
  message: string | undefined;
  shouldRetry: string | null;
  recorded: boolean;
}

/** A node app serving with `replica`'s credit and a real spool; `call` says how it answered each API. */
async function startNode(t: Test, replica: Replica): Promise<Record<'chat' | 'messages' | 'embeddings' | 'models' | 'mcp' | 'chatWithoutKey', () => Promise<Answer>> & { readyz: () => Promise<{ status: number; code?: string }> }> {
  const upstream = await startFakeUpstream(t);
  const file = path.join(tempStateDir(t), 'spool.db');
  const spool = new SpoolStore({ file, meta: createSpoolFile(file, 'n1'), logger: quietLogger(), limits: () => ({ quotaBytes: 64 * 1024 * 1024, fullPolicy: 'reject' }) });
  t.teardown(() => spool.close());
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { spool, credit: replica.credit } });
  const recorded = (requestId: string | null): boolean => {
    const db = new Database(file, { readonly: true });
    try {
      return db.prepare('select 1 from records where request_id = ?').get(requestId) !== undefined;
    } finally {
      db.close();
    }
  };
  const call = async (method: string, route: string, body?: unknown, withKey = true): Promise<Answer> => {
    const res = await fetch(`${node.origin}${route}`, {
      method,
      headers: {
        ...(withKey ? { authorization: `Bearer ${node.secret}` } : {}),
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...(route === '/v1/messages' ? { 'anthropic-version': '2023-06-01' } : {}),
        ...(route.startsWith('/mcp/') ? { accept: 'application/json, text/event-stream' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    let error: { code?: string; message?: string } | undefined;
    try {
      error = (JSON.parse(text) as { error?: { code?: string; message?: string } }).error;
    } catch {
      error = undefined;
    }
    return { status: res.status, code: error?.code, message: error?.message, shouldRetry: res.headers.get('x-should-retry'), recorded: recorded(res.headers.get('x-request-id')) };
  };
  const hello = { model: 'echo', max_tokens: 16, messages: [{ role: 'user', content: 'Say hello.' }] };
  return {
    chat: () => call('POST', '/v1/chat/completions', hello),
    chatWithoutKey: () => call('POST', '/v1/chat/completions', hello, false),
    messages: () => call('POST', '/v1/messages', hello),
    embeddings: () => call('POST', '/v1/embeddings', { model: 'echo', input: 'hello' }),
    models: () => call('GET', '/v1/models'),
    mcp: () => call('POST', '/mcp/tools', { jsonrpc: '2.0', id: 1, method: 'initialize', params: {} }),
    readyz: async () => {
      const res = await fetch(`${node.origin}/readyz`);
      const body = (await res.json()) as { code?: string };
      return { status: res.status, ...(body.code !== undefined ? { code: body.code } : {}) };
    },
  };
}

t.test('the identify stage refuses every request of a deleted node, before its config or body is looked at, from the lease book in memory', async (t) => {
  const holder = stateDir(t)();
  const ctx = { deps: { credit: holder.credit }, config: undefined, api: 'chat.completions', body: {} } as unknown as PipelineContext;
  t.equal((identifyStage.run(ctx) as { error: { code: string } } | undefined)?.error.code, 'ZN_ERR_NODE_NOT_READY', 'not deleted: the stage goes on as before');
  holder.channel.onCutOff(revoked);
  t.equal((identifyStage.run(ctx) as { error: { code: string } } | undefined)?.error.code, 'ZN_ERR_NODE_NOT_READY', 'a revoked credential: not refused as deleted');
  holder.channel.onCutOff(deleted);
  t.equal(holder.book.deletion()?.code, 'NODE_DELETED');
  t.equal((identifyStage.run(ctx) as { error: { code: string } } | undefined)?.error.code, 'ZN_ERR_NODE_DELETED', 'deleted: refused first');
  holder.channel.onEstablished(() => true, { sessionId: 's2' });
  t.equal(holder.book.deletion(), undefined, 'a session established again lifts it');
});

t.test('a deleted node refuses every caller request with 503 ZN_ERR_NODE_DELETED on every replica and after a restart, recording none, until a session is established again', async (t) => {
  const open = stateDir(t);
  const holder = open();
  const other = open({ reportIntervalMs: 20 });
  const node = await startNode(t, holder);
  const otherNode = await startNode(t, other);
  t.match(await node.chat(), { status: 200, recorded: true }, 'an unpriced chat call is served before the deletion');
  t.match(await otherNode.chat(), { status: 200 }, 'by the other replica too');
  t.same(await node.readyz(), { status: 200 }, 'ready before the deletion');

  holder.channel.onCutOff(deleted);
  const refused = { status: 503, code: 'ZN_ERR_NODE_DELETED', shouldRetry: 'false', recorded: false };
  for (const api of ['chat', 'messages', 'embeddings', 'models', 'mcp', 'chatWithoutKey'] as const) {
    t.match(await node[api](), refused, `${api}: refused as deleted, not recorded`);
  }
  t.same(await node.readyz(), { status: 503, code: 'ZN_ERR_NODE_DELETED' }, 'not ready once deleted: a load balancer stops sending callers');
  const answer = await node.chat();
  t.equal(answer.message, errorTable.ZN_ERR_NODE_DELETED.message);
  t.match(answer.message, /deleted from the control plane and no longer serves.*zenova gateway-node reenroll-command NAME.*--reenroll/, 'the caller is told what the operator does');
  await waitFor(async () => (await otherNode.chat()).code === 'ZN_ERR_NODE_DELETED', { what: 'the replica without the link to refuse at its next lease report' });
  const restarted = await startNode(t, open());
  t.match(await restarted.models(), refused, 'a restart refuses at once');

  // A re-enrollment: the link holder's next session is accepted.
  holder.channel.onEstablished(() => true, { sessionId: 's2' });
  t.match(await node.chat(), { status: 200, recorded: true }, 'the link holder serves again');
  t.same(await node.readyz(), { status: 200 }, 'and is ready again');
  await waitFor(async () => (await otherNode.chat()).status === 200, { what: 'the other replica to serve again at its next lease report' });
});

t.test('a credential refused for good withdraws the credit only: unpriced requests are still served and recorded', async (t) => {
  const holder = stateDir(t)();
  const node = await startNode(t, holder);
  holder.channel.onCutOff(revoked);
  t.equal(holder.book.deletion(), undefined);
  t.match(await node.chat(), { status: 200, recorded: true }, 'an unpriced chat call is served');
  t.match(await node.models(), { status: 200 }, 'the models list too');
});
