// An upstream error that blames the caller's request (400, 404, 422, …) reaches the caller with the
// upstream's own message (routing/an-upstream-error-that-blames-the-request-…test.ts). That message
// may quote the caller's request, its e-mail addresses and phone numbers: the caller may read its
// own text back, but the node's log line keeps only the node's words and the upstream's code
// (ZenovaError.logMessage), not the message nor the param (a field name the caller chose may hold
// its data too); the request record spooled for the control plane never held either. Before, the
// log line's `reason` was the whole relayed message. (The caller's text here is sent as "hi": the
// record keeps the request body under rules of its own — keepBodies, input masks — not this test's.)
import path from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import Database from 'better-sqlite3';
import t from 'tap';
import type { Test } from 'tap';
import { createSpoolFile } from '../../../edge-node/src/spool/spool-file.js';
import { SpoolStore } from '../../../edge-node/src/spool/spool-store.js';
import type { RequestRecord } from '../../../proto/src/index.js';
import { startFakeAnthropicUpstream } from '../../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { anthropicSdkError } from '../anthropic-fixtures.js';
import { quietLogger, tempStateDir } from '../spool/spool-helpers.js';
import { sdkError, startPipelineNode, withClaudeRoute } from './pipeline-harness.js';

const EMAIL = 'jane.doe@example.com';
const PHONE = '13800138000';
const QUOTING = `Invalid value 'my email is ${EMAIL}, phone ${PHONE}' for messages[0].content: not allowed.`;
/** A param naming a field the caller chose (a metadata key holding its data). */
const PARAM = `metadata.jane_${PHONE}`;

/** A real SQLite spool for the node, and a reader of the records it holds. */
function spoolFor(t: { teardown(fn: () => unknown): void }) {
  const file = path.join(tempStateDir(t), 'spool.db');
  const spool = new SpoolStore({ file, meta: createSpoolFile(file, 'node-1'), logger: quietLogger(), limits: () => ({ quotaBytes: 1024 ** 3, fullPolicy: 'reject' }) });
  t.teardown(() => spool.close());
  const records = (): RequestRecord[] => {
    const db = new Database(file, { readonly: true });
    try {
      return (db.prepare('select record_json from records order by sequence').pluck().all() as string[]).map((j) => JSON.parse(j) as RequestRecord);
    } finally {
      db.close();
    }
  };
  return { spool, records };
}

/** The request's record, once spooled. */
async function oneRecord(records: () => RequestRecord[]): Promise<RequestRecord> {
  await waitFor(() => records().length === 1, { what: 'the request record spooled' });
  return records()[0]!;
}

function neitherEmailNorPhone(t: Test, text: string, where: string): void {
  t.notOk(text.includes(EMAIL), `no e-mail address in ${where}`);
  t.notOk(text.includes(PHONE), `no phone number in ${where}`);
  t.notOk(text.includes('my email is'), `none of the quoted text in ${where}`);
}

t.test("an OpenAI caller reads the upstream's message quoting its text; the node's log and the record do not", async (t) => {
  const upstream = await startFakeUpstream(t, {
    failNext: { count: 10, status: 400, body: { error: { message: QUOTING, type: 'invalid_request_error', param: PARAM, code: 'invalid_value' } } },
  });
  const { spool, records } = spoolFor(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { spool } });
  for (const stream of [false, true]) {
    const err = await sdkError(node.client().chat.completions.create({ model: 'echo', stream, messages: [{ role: 'user', content: 'hi' }] }));
    t.equal(err.status, 400, `stream ${stream}`);
    t.equal((err.error as { message?: unknown }).message, `Upstream "demo" answered HTTP 400 (invalid_value): ${QUOTING}`, "the caller's answer relays the message unchanged");
    t.equal(err.param, PARAM, "the caller's answer relays the param");
  }
  const lines = node.logs().filter((line) => line.msg === 'upstream call failed');
  t.equal(lines.length, 2, 'one line per request');
  for (const line of lines) {
    t.match(line, { code: 'ZN_ERR_UPSTREAM_ERROR', reason: 'Upstream "demo" answered HTTP 400 (invalid_value); its message was relayed to the caller and is not logged.' }, "the log line says what the upstream answered, in the node's words");
  }
  neitherEmailNorPhone(t, node.logText(), "the node's log");
  await waitFor(() => records().length === 2, { what: 'both request records spooled' });
  for (const record of records()) {
    t.match(record, { status: 'failed', httpStatus: 400, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
    neitherEmailNorPhone(t, JSON.stringify(record), 'the request record');
  }
});

t.test("an Anthropic caller reads it too; the node's log and the record do not", async (t) => {
  const anthropic = await startFakeAnthropicUpstream(t, {
    failNext: { count: 1, status: 422, body: { type: 'error', error: { type: 'invalid_request_error', message: QUOTING } } },
  });
  const { spool, records } = spoolFor(t);
  const node = await startPipelineNode(t, { upstreamUrl: 'http://127.0.0.1:9/v1', services: { spool }, bundle: (base) => withClaudeRoute(base, anthropic.url) });
  const client = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
  const err = await anthropicSdkError(client.messages.create({ model: 'claude', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }));
  t.equal(err.status, 422);
  const error = (err.error as { error?: Record<string, unknown> }).error ?? {};
  t.equal(error.message, `Upstream "claude" answered HTTP 422 (invalid_request_error): ${QUOTING}`, "the caller's answer relays the message unchanged");
  t.match(node.logs().find((line) => line.msg === 'upstream call failed'), {
    code: 'ZN_ERR_UPSTREAM_ERROR',
    reason: 'Upstream "claude" answered HTTP 422 (invalid_request_error); its message was relayed to the caller and is not logged.',
  });
  neitherEmailNorPhone(t, node.logText(), "the node's log");
  const record = await oneRecord(records);
  t.match(record, { status: 'failed', httpStatus: 422, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
  neitherEmailNorPhone(t, JSON.stringify(record), 'the request record');
});
