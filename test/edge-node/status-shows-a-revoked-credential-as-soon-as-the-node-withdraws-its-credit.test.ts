/**
 * `zenova-node status` shows a node whose credential the control plane revoked (CREDENTIAL_REVOKED:
 * the node was re-enrolled on another host) as cut off — `credential: REVOKED by the control plane`,
 * with the re-enroll advice — as soon as it withdraws its credit and refuses priced callers with
 * ZN_ERR_CREDIT_WITHDRAWN, whichever way it knows it: from the withdrawal in its credit lease book
 * (also after a restart while the control plane is out of reach, when the link says only
 * GATEWAY_UNREACHABLE), or from its control link's refusal when the book cannot say. Not once a
 * session lifted the withdrawal, nor for a refusal of the current credential with no withdrawal in
 * the book (the previous credential still to try); a deletion still shows as deleted, alone.
 * The book is written as the serving node writes it (CreditChannel.onCutOff on the real lease
 * store) and read by the real `zenova-node status` command, which writes nothing beside it.
 */
import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import type { Test } from 'tap';
import { CreditChannel } from '../../edge-node/src/billing/credit-channel.js';
import { LeaseBook } from '../../edge-node/src/billing/lease-book.js';
import { LEASE_DB_FILE, openLeaseStore } from '../../edge-node/src/billing/lease-store.js';
import { saveControlStatus } from '../../edge-node/src/control/control-status.js';
import type { ControlStatusRecord } from '../../edge-node/src/control/control-status.js';
import { cutOffBy, refusalAdvice } from '../../edge-node/src/control/refusal-advice.js';
import type { Logger } from '../../edge-node/src/logger.js';
import { saveCredentials } from '../../edge-node/src/state/credential-store.js';
import { createTestCa } from '../fixtures/tls.js';
import { runNodeCli } from './cli-capture.js';
import { newCredential, writeEnrolledState } from './control-fixtures.js';
import type { EnrolledState } from './control-fixtures.js';

const REVOKED_ROW = /\ncredential:\s+REVOKED by the control plane \(CREDENTIAL_REVOKED at [^;)]+; [^)]*\): its credit is withdrawn, priced requests are refused with ZN_ERR_CREDIT_WITHDRAWN/;
const REENROLL_ADVICE = /\nwhat to do:\s+the credential was revoked: run `zenova gateway-node reenroll-command NAME`/;

interface StatusJson {
  deleted: { code: string } | null;
  credentialRevoked: { code: string; at: string; message: string; advice: string; source: string } | null;
}

async function enrolled(t: Test): Promise<EnrolledState> {
  return writeEnrolledState(t.testdir({}), { target: '127.0.0.1:9', ca: await createTestCa() });
}

/** The node's credit lease book on `state`, with the link holder's channel, as serve opens them. */
function leaseBook(t: Test, state: EnrolledState): { channel: CreditChannel; book: LeaseBook; close: () => void } {
  const store = openLeaseStore(state.dir, { nodeId: state.identity.nodeId, owner: 1 });
  const logger = pino({ level: 'silent' }) as unknown as Logger;
  const book = new LeaseBook(store, { logger });
  const channel = new CreditChannel(book, { reportIntervalMs: 60_000, logger });
  let closed = false;
  const close = (): void => {
    if (closed) return;
    closed = true;
    channel.stop();
    store.close();
  };
  t.teardown(close);
  return { channel, book, close };
}

/** The connect loop's cut-off for a refusal with nothing left to try, told to the channel as serve does. */
function cutOff(channel: CreditChannel, code: string, message: string): void {
  const cut = cutOffBy({ reason: 'refused', code, message }, { usePrevious: false, credentialReplaced: false });
  if (cut === undefined) throw new Error(`${code} does not cut the node off`);
  channel.onCutOff(cut);
}

async function linkSays(state: EnrolledState, lastError: ControlStatusRecord['lastError'], serving = true): Promise<void> {
  await saveControlStatus(state.store, {
    connected: false,
    since: new Date().toISOString(),
    lastError,
    sessionId: null,
    pid: process.pid,
    serving,
    updatedAt: new Date().toISOString(),
  });
}

function refusal(code: string, message: string, resolvedAt?: string): NonNullable<ControlStatusRecord['lastError']> {
  const advice = refusalAdvice(code);
  return { code, message, at: new Date().toISOString(), ...(advice !== undefined ? { advice } : {}), ...(resolvedAt !== undefined ? { resolvedAt } : {}) };
}

async function status(state: EnrolledState): Promise<{ code: number; text: string; json: StatusJson }> {
  const text = await runNodeCli(['status', '--state-dir', state.dir]);
  const json = await runNodeCli(['status', '--state-dir', state.dir, '--json']);
  return { code: text.code, text: text.stdout, json: JSON.parse(json.stdout) as StatusJson };
}

// From the book: also while the link says only GATEWAY_UNREACHABLE (a restart with the control plane down), and once stopped.
t.test('from the lease book, with the re-enroll advice', async (t) => {
  const state = await enrolled(t);
  const { channel, close } = leaseBook(t, state);
  await linkSays(state, refusal('GATEWAY_UNREACHABLE', 'connect ECONNREFUSED'));
  t.notMatch((await status(state)).text, /REVOKED/, 'nothing is said of a revocation before it');

  cutOff(channel, 'CREDENTIAL_REVOKED', "the node's credentials were revoked");
  // A restart while the control plane is out of reach: the book still refuses, the link knows only that.
  const live = await status(state);
  t.equal(live.code, 0, 'the node is still enrolled on this host');
  t.match(live.text, REVOKED_ROW, 'status says the credential was revoked and what the node refuses');
  t.match(live.text, REENROLL_ADVICE, 'and what the operator does next');
  t.notMatch(live.text, /reconnects by itself/, 'never that the node reconnects by itself: no reconnect cures a revoked credential');
  t.match(live.text, /last error:\s+GATEWAY_UNREACHABLE/, "the link's own error is still shown");
  t.notMatch(live.text, /\ndeleted:/, 'a revoked credential is no deletion');
  t.equal(live.text.match(/\ncredential:/g)?.length, 1, 'one credential row: never also "valid until"');
  t.match(live.json, {
    deleted: null,
    credentialRevoked: { code: 'CREDENTIAL_REVOKED', at: /^\d{4}-/, message: "the node's credentials were revoked", advice: refusalAdvice('CREDENTIAL_REVOKED'), source: 'lease-book' },
  });

  // Stopped, the book is read through a private copy: status writes nothing beside it.
  close();
  const sidecars = (): boolean[] => ['-wal', '-shm'].map((s) => existsSync(path.join(state.dir, `${LEASE_DB_FILE}${s}`)));
  const before = { sidecars: sidecars(), files: readdirSync(state.dir).sort() };
  const stopped = await status(state);
  t.match(stopped.text, REVOKED_ROW, 'node-edge stopped: still shown from the book');
  t.match(stopped.json.credentialRevoked, { source: 'lease-book' });
  t.same({ sidecars: sidecars(), files: readdirSync(state.dir).sort() }, before, 'status made no -wal, -shm or other file in the state dir');

  // Re-enrolled on this host while stopped: the new credential is saved, the withdrawal stands until
  // node-edge's first session; status does not ask for the re-enrollment again.
  await saveCredentials(state.store, { current: newCredential() });
  const reenrolled = await status(state);
  t.match(reenrolled.text, /\ncredential:\s+REVOKED by the control plane \(CREDENTIAL_REVOKED at [^)]+\), and a new credential was saved since \(\d{4}-[^,]+, a re-enrollment on this host\)/, 'the row says a new credential is saved since');
  t.match(reenrolled.text, /\nwhat to do:\s+nothing: node-edge takes the new credential by itself/, 'node-edge running: that it takes it by itself, not to re-enroll');
  t.notMatch(reenrolled.text, REENROLL_ADVICE, 'not the re-enroll advice again');
  t.match(reenrolled.json.credentialRevoked, { source: 'lease-book', newerCredentialSavedAt: /^\d{4}-/ });
  await linkSays(state, refusal('GATEWAY_UNREACHABLE', 'connect ECONNREFUSED'), false);
  t.match((await status(state)).text, /\nwhat to do:\s+start node-edge: the withdrawal is lifted at its first control session/, 'node-edge stopped: to start it');

  // A session established again (a same-host re-enrollment) lifts the withdrawal: nothing is shown.
  const reopened = leaseBook(t, state);
  reopened.book.resume();
  await linkSays(state, refusal('CREDENTIAL_REVOKED', 'revoked', new Date().toISOString()));
  const lifted = await status(state);
  t.notMatch(lifted.text, /REVOKED by/, 'lifted: no revocation row');
  t.equal(lifted.json.credentialRevoked, null);
  t.equal(reopened.book.withdrawal(), undefined, 'the book holds no withdrawal');
});

// From the link's unresolved refusal when the book cannot say; not when the book holds no withdrawal.
t.test('from the control link when the book cannot say', async (t) => {
  const state = await enrolled(t);
  await linkSays(state, refusal('CREDENTIAL_REVOKED', "the node's credentials were revoked"));
  const noBook = await status(state);
  t.match(noBook.text, REVOKED_ROW, 'no lease book: the link says it');
  t.match(noBook.text, REENROLL_ADVICE);
  t.match(noBook.text, /last error:\s+CREDENTIAL_REVOKED at /);
  t.equal(noBook.text.match(/\nwhat to do:/g)?.length, 1, "the advice once, not again under the link's error");
  t.match(noBook.json.credentialRevoked, { code: 'CREDENTIAL_REVOKED', source: 'control-link', advice: refusalAdvice('CREDENTIAL_REVOKED') });

  // A book that cannot be read leaves the link to say it.
  const { close } = leaseBook(t, state);
  close();
  rmSync(path.join(state.dir, LEASE_DB_FILE));
  for (const s of ['-wal', '-shm']) rmSync(path.join(state.dir, `${LEASE_DB_FILE}${s}`), { force: true });
  mkdirSync(path.join(state.dir, LEASE_DB_FILE));
  t.match((await status(state)).json.credentialRevoked, { source: 'control-link' }, 'a directory where the book should be: the link says it');
  rmSync(path.join(state.dir, LEASE_DB_FILE), { recursive: true });

  // A readable book without a withdrawal: the refusal was of the current credential, with the
  // previous one still to try (or a newer one saved): the node withdrew nothing and refuses nobody.
  leaseBook(t, state).close();
  const notCut = await status(state);
  t.notMatch(notCut.text, /REVOKED by/, 'the book says the credit is not withdrawn');
  t.equal(notCut.json.credentialRevoked, null);
  t.match(notCut.text, /last error:\s+CREDENTIAL_REVOKED at [^\n]+\nwhat to do:\s+the credential was revoked/, "the link's error keeps its own advice");

  // Once a session was established again, the refusal is history.
  await linkSays(state, refusal('CREDENTIAL_REVOKED', 'revoked', new Date().toISOString()));
  rmSync(path.join(state.dir, LEASE_DB_FILE));
  t.equal((await status(state)).json.credentialRevoked, null, 'resolved: nothing shown');
});

// Whatever the book said before, a deletion shows alone.
t.test('a deleted node still shows as deleted', async (t) => {
  const state = await enrolled(t);
  const { channel } = leaseBook(t, state);
  cutOff(channel, 'CREDENTIAL_REVOKED', 'revoked');
  await linkSays(state, refusal('NODE_DELETED', 'node was deleted'));
  const linkDeleted = await status(state);
  t.match(linkDeleted.text, /\ndeleted:\s+DELETED in the control plane \(NODE_DELETED at [^)]+\): every caller request is refused with ZN_ERR_NODE_DELETED/);
  t.notMatch(linkDeleted.text, /REVOKED by/, 'a deletion says more than the revoked credential before it');
  t.match(linkDeleted.json, { deleted: { code: 'NODE_DELETED', source: 'control-link' }, credentialRevoked: null });

  cutOff(channel, 'NODE_DELETED', 'node was deleted');
  await linkSays(state, refusal('GATEWAY_UNREACHABLE', 'connect ECONNREFUSED'));
  const bookDeleted = await status(state);
  t.match(bookDeleted.text, /\ndeleted:\s+DELETED in the control plane \(NODE_DELETED at /);
  t.match(bookDeleted.text, /\nwhat to do:\s+the node was deleted in the control plane and cannot come back/);
  t.notMatch(bookDeleted.text, /REVOKED by/);
  t.match(bookDeleted.json, { deleted: { code: 'NODE_DELETED', source: 'lease-book' }, credentialRevoked: null });
});
