// The control plane cut the node off (deleted, or its last credential refused): its credit is
// withdrawn in credit-leases.sqlite by the replica holding the control link, and every replica on
// the state dir refuses priced requests with ZN_ERR_CREDIT_WITHDRAWN — a deletion closes the leases
// for good, a revoked credential suspends them until a control session is established again (a lift
// the store could not write then is written later). A credential refused otherwise withdraws nothing.
// A deletion is also known in memory to every replica (LeaseBook.deletion, read again at each lease
// report) and to a restart: the pipeline then refuses every request, unpriced ones too, as
// ZN_ERR_NODE_DELETED (test/edge-node/pipeline/a-deleted-node-refuses-every-caller-request.test.ts).
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import type { Test } from 'tap';
import { CreditChannel } from '../../../edge-node/src/billing/credit-channel.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore, openLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import type { LeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { cutOffBy } from '../../../edge-node/src/control/refusal-advice.js';
import type { Logger } from '../../../edge-node/src/logger.js';
import type { PipelineContext } from '../../../edge-node/src/pipeline/context.js';
import { waitFor } from '../../fixtures/wait-for.js';

const NOW = Date.now();

interface Replica {
  book: LeaseBook;
  credit: LeaseCredit;
  channel: CreditChannel;
  lines: Array<{ level: number; msg: string } & Record<string, unknown>>;
  /** The next `n` lifts of the withdrawal fail, as on a full disk or SQLITE_BUSY. */
  failLifts(n: number): void;
}

/** Replicas' books on one state dir (separate SQLite connections, as separate processes have). */
function stateDir(t: Test): (owner: number, opts?: { reportIntervalMs?: number }) => Replica {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'zn-credit-withdrawn-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return (owner, opts = {}) => {
    const opened = openLeaseStore(dir, { nodeId: 'n1', owner });
    t.teardown(() => opened.close());
    let liftFailures = 0;
    const store: LeaseStore = {
      ...opened,
      setWithdrawal: (withdrawal) => {
        if (withdrawal === undefined && liftFailures > 0) {
          liftFailures -= 1;
          throw Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' });
        }
        return opened.setWithdrawal!(withdrawal);
      },
    };
    const lines: Replica['lines'] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as Replica['lines'][number]) }) as unknown as Logger;
    const book = new LeaseBook(store, { logger });
    const channel = new CreditChannel(book, { reportIntervalMs: opts.reportIntervalMs ?? 60_000, logger });
    t.teardown(() => channel.stop());
    return { book, credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, logger), channel, lines, failLifts: (n) => void (liftFailures = n) };
  };
}

function request(model = 'priced'): PipelineContext {
  return {
    requestId: `req-${Math.random()}`,
    api: 'embeddings',
    model,
    maxOutputTokens: null,
    estimatedInputTokens: 1,
    config: {
      prices: new Map([
        ['priced', { model: 'priced', inputMicrosPerToken: 100, outputMicrosPerToken: 0, requestMicros: 0 }],
        ['free', { model: 'free', inputMicrosPerToken: 0, outputMicrosPerToken: 0, requestMicros: 0 }],
      ]),
      toolServers: new Map(),
    },
    key: { id: 'key-1', accountId: 'acct-1' },
    clock: { now: () => NOW, monotonic: () => 0 },
    attempts: [],
    usage: { inputTokens: 0, outputTokens: 0, estimated: false },
    cost: { reservedMicros: 0, costMicros: 0, leaseId: null, priced: false },
    cleanups: [],
  } as unknown as PipelineContext;
}

/** Reserves for one request and ends it at once; the refusal's code, or 'served'. */
function outcome(credit: LeaseCredit, model?: string): string {
  const ctx = request(model);
  const refused = credit.preauthorise(ctx);
  for (const cleanup of ctx.cleanups) cleanup();
  return refused === undefined ? 'served' : refused.error.code;
}

const revoked = { code: 'CREDENTIAL_REVOKED', message: "the node's credentials were revoked", final: false };
const deleted = { code: 'NODE_DELETED', message: 'node n1 was deleted', final: true };

t.test('a credential refused for good suspends the leases of every replica until the link holder establishes a session again', async (t) => {
  const open = stateDir(t);
  const holder = open(1);
  holder.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 100_000, expiresAt: NOW + 60_000 });
  const other = open(2);
  t.equal(outcome(other.credit), 'served', 'both replicas serve priced requests from the lease');
  t.equal(outcome(holder.credit), 'served');

  holder.channel.onCutOff(revoked);
  t.equal(outcome(holder.credit), 'ZN_ERR_CREDIT_WITHDRAWN', 'the link holder refuses priced requests');
  t.equal(holder.credit.nodeDeletion(), undefined, 'not deleted: unpriced requests are not refused as ZN_ERR_NODE_DELETED');
  t.equal(outcome(other.credit), 'ZN_ERR_CREDIT_WITHDRAWN', 'and so does the replica without the link, which loaded the lease open');
  const ctx = request();
  const refusal = other.credit.preauthorise(ctx);
  t.match(refusal?.error.message, /control plane refused its credential \(CREDENTIAL_REVOKED\).*again once it reconnects/, 'the caller is told why');
  t.equal(outcome(other.credit, 'free'), 'served', 'a request that cannot cost anything is still served');
  t.equal(holder.book.leaseOf('acct-1')?.state, 'open', 'the lease is suspended, not closed');
  t.equal(open(3).credit.preauthorise(request())?.error.code, 'ZN_ERR_CREDIT_WITHDRAWN', 'a replica started afterwards refuses too');

  holder.channel.onCutOff(revoked);
  const logged = holder.lines.filter((l) => l.msg.startsWith('the control plane refused'));
  t.equal(logged.length, 1, 'logged once, though each slow retry is refused again');
  t.match(logged[0], { level: 50, code: 'CREDENTIAL_REVOKED', suspendedLeaseIds: ['lease-1'] });

  // A re-enrollment on this host: the holder's next session is accepted.
  holder.channel.onEstablished(() => true, { sessionId: 's2' });
  holder.channel.onEnded();
  t.equal(outcome(other.credit), 'served', 'every replica serves priced requests again');
  t.equal(outcome(holder.credit), 'served');
  t.ok(holder.lines.some((l) => l.level === 30 && l.msg.startsWith('a control session was established again')), 'says the credit is back');
});

t.test('a deleted node closes its leases for good: no replica serves from them, nor a restart, and every one of them knows the node deleted, so it serves no request at all', async (t) => {
  const open = stateDir(t);
  const holder = open(1);
  holder.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 100_000, expiresAt: NOW + 60_000 });
  const other = open(2, { reportIntervalMs: 20 });
  const inFlight = request();
  t.equal(other.credit.preauthorise(inFlight), undefined, 'a request in flight holds a reservation');

  holder.channel.onCutOff(deleted);
  t.equal(holder.book.lease('lease-1')?.state, 'returned', 'the lease is closed');
  t.equal(outcome(other.credit), 'ZN_ERR_CREDIT_WITHDRAWN');
  t.match(other.credit.preauthorise(request())?.error.message, /refused the node \(NODE_DELETED: it was deleted\).*send them to another node/);
  t.equal(holder.credit.nodeDeletion()?.code, 'NODE_DELETED', 'the link holder knows the node deleted: the pipeline refuses unpriced requests too (ZN_ERR_NODE_DELETED)');
  await waitFor(() => other.credit.nodeDeletion() !== undefined, { what: 'the replica without the link to learn of the deletion at its next lease report' });
  for (const cleanup of inFlight.cleanups) cleanup();
  t.equal(open(3).book.leaseOf('acct-1'), undefined, 'a restart finds the lease closed');
  const restarted = open(4);
  t.equal(outcome(restarted.credit), 'ZN_ERR_CREDIT_WITHDRAWN');
  t.equal(restarted.credit.nodeDeletion()?.code, 'NODE_DELETED', 'and knows the node deleted from its start');
  t.match(holder.lines.find((l) => l.msg.startsWith('the control plane refused')), { level: 50, code: 'NODE_DELETED', closedLeaseIds: ['lease-1'] });
});

t.test('a node deleted after its credential was refused closes the suspended leases and says so', async (t) => {
  const open = stateDir(t);
  const holder = open(1);
  holder.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 100_000, expiresAt: NOW + 60_000 });
  holder.channel.onCutOff(revoked);
  holder.channel.onCutOff(deleted);
  t.equal(holder.book.lease('lease-1')?.state, 'returned');
  t.equal(holder.credit.nodeDeletion()?.code, 'NODE_DELETED', 'deleted now');
  t.same(holder.lines.filter((l) => l.msg.startsWith('the control plane refused')).map((l) => l.code), ['CREDENTIAL_REVOKED', 'NODE_DELETED']);
});

t.test('a book without a store that keeps the withdrawal holds it in memory', async (t) => {
  const book = new LeaseBook(memoryLeaseStore);
  const channel = new CreditChannel(book, { reportIntervalMs: 60_000, logger: pino({ level: 'silent' }) });
  t.teardown(() => channel.stop());
  const credit = new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' }));
  book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 100_000, expiresAt: NOW + 60_000 });
  channel.onCutOff(revoked);
  t.equal(outcome(credit), 'ZN_ERR_CREDIT_WITHDRAWN');
  channel.onEstablished(() => true, { sessionId: 's' });
  t.equal(outcome(credit), 'served');
});

t.test('a credential refused invalid, expired or superseded withdraws nothing: every replica goes on serving priced requests', async (t) => {
  const open = stateDir(t);
  const holder = open(1);
  holder.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 100_000, expiresAt: NOW + 60_000 });
  const other = open(2);
  for (const code of ['CREDENTIAL_INVALID', 'CREDENTIAL_EXPIRED', 'CREDENTIAL_SUPERSEDED']) {
    // As the connect loop has it at the slow retry: the fallback spent, nothing newer saved.
    const cut = cutOffBy({ reason: 'refused', code, message: `refused: ${code}` }, { usePrevious: false, credentialReplaced: false });
    if (cut !== undefined) holder.channel.onCutOff(cut);
    t.equal(outcome(holder.credit), 'served', `${code}: the link holder serves priced requests`);
    t.equal(outcome(other.credit), 'served', `${code}: and so does the other replica`);
  }
  t.equal(holder.book.withdrawal(), undefined, 'no withdrawal recorded');
  t.notOk(holder.lines.some((l) => l.msg.startsWith('the control plane refused')), 'nothing logged as a withdrawal');
});

const lifts = (r: Replica) => r.lines.filter((l) => l.msg.startsWith("the lease store could not lift the node's credit withdrawal"));

t.test('a lift the lease store could not write when the session came up is written by the next priced request refused for it, and every replica serves again', async (t) => {
  const open = stateDir(t);
  const holder = open(1);
  holder.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 100_000, expiresAt: NOW + 60_000 });
  const other = open(2);
  holder.channel.onCutOff(revoked);
  holder.failLifts(1);
  holder.channel.onEstablished(() => true, { sessionId: 's2' });
  t.equal(lifts(holder).length, 1, 'the failed lift is logged');
  t.match(lifts(holder)[0], { level: 50 });
  t.equal(outcome(other.credit), 'ZN_ERR_CREDIT_WITHDRAWN', 'the withdrawal still stands in the store');
  t.equal(outcome(holder.credit), 'served', "the link holder's priced request writes the lift and is served");
  t.equal(outcome(other.credit), 'served', 'every replica serves priced requests again');
  t.ok(holder.lines.some((l) => l.level === 30 && l.msg.startsWith("the lease store could lift the node's credit withdrawal at last")), 'says the credit is back');

  // A lift still pending when the node is cut off again is dropped: the new withdrawal stands.
  holder.channel.onEnded();
  holder.channel.onCutOff(revoked);
  holder.failLifts(1);
  holder.channel.onEstablished(() => true, { sessionId: 's3' });
  holder.channel.onEnded();
  holder.channel.onCutOff(revoked);
  t.equal(outcome(holder.credit), 'ZN_ERR_CREDIT_WITHDRAWN', 'cut off again after the failed lift: refused');
  t.equal(outcome(other.credit), 'ZN_ERR_CREDIT_WITHDRAWN');
});

t.test('a lift the lease store could not write when the session came up is retried at each lease report, logged once, until every replica serves again', async (t) => {
  const open = stateDir(t);
  const holder = open(1, { reportIntervalMs: 20 });
  holder.book.grant({ accountId: 'acct-1', leaseId: 'lease-1', amountMicros: 100_000, expiresAt: NOW + 60_000 });
  const other = open(2);
  holder.channel.onCutOff(revoked);
  // The lift at the session's start and the first report's retry fail; a later report's is written.
  holder.failLifts(2);
  holder.channel.onEstablished(() => true, { sessionId: 's2' });
  await waitFor(() => outcome(other.credit) === 'served', { what: 'the other replica to serve a priced request' });
  t.equal(outcome(holder.credit), 'served', 'the link holder serves too');
  t.equal(lifts(holder).length, 1, 'the failing lift is logged once');
});
