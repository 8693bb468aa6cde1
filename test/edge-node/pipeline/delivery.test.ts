// Delivery waits for the record: a streamed answer's terminal event, and a JSON answer as a whole,
// reach the caller only once the spool stage has made the request's record durable. And nothing
// goes upstream before the request's open row is durable (a crash then leaves an interrupted record).
import t from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import type { RequestSpool } from '../../../edge-node/src/spool/request-spool.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { sdkError, startPipelineNode } from './pipeline-harness.js';
import { zenovaError } from '../../../edge-node/src/errors.js';

/** A spool whose finalise resolves only when the test says so. */
function gatedSpool() {
  const records: RequestRecord[] = [];
  let open: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => (open = resolve));
  const spool: RequestSpool = {
    open: () => undefined,
    finalise: async (record) => {
      records.push(record);
      await gate;
    },
    keepsBodies: () => false,
    fullness: () => 0,
  };
  return { spool, records, release: () => open() };
}

t.test('the end of a stream waits until the record is durable', async (t) => {
  const upstream = await startFakeUpstream(t);
  const gated = gatedSpool();
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { spool: gated.spool } });
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'hold-the-end' }] }),
  });
  const reader = res.body!.getReader();
  let text = '';
  const pump = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      text += Buffer.from(value).toString('utf8');
    }
  })();
  await waitFor(() => gated.records.length === 1 && text.includes('hold-the-end'), { what: 'the content and the spooled record' });
  t.notMatch(text, /\[DONE\]/, 'the terminal event is held while the record is not durable');
  gated.release();
  await pump;
  t.match(text, /data: \[DONE\]\n\n$/, 'it follows once the record is durable');
  t.equal(gated.records[0]?.requestId, res.headers.get('x-request-id'));
});

t.test('a JSON answer is sent only after the record is durable', async (t) => {
  const upstream = await startFakeUpstream(t);
  const gated = gatedSpool();
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { spool: gated.spool } });
  let answered = false;
  const call = node
    .client()
    .chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'json' }] })
    .then((r) => {
      answered = true;
      return r;
    });
  await waitFor(() => gated.records.length === 1, { what: 'the record to be spooled' });
  t.notOk(answered, 'no answer yet');
  gated.release();
  const answer = await call;
  t.equal(answer.model, 'echo');
});

/** A spool whose open rows become durable only when the test says so (or never: `fail`). */
function gatedOpenSpool() {
  const records: RequestRecord[] = [];
  const opened: string[] = [];
  let settle: { resolve: () => void; reject: (err: Error) => void } | undefined;
  const gate = new Promise<void>((resolve, reject) => (settle = { resolve, reject }));
  gate.catch(() => undefined);
  const spool: RequestSpool = {
    open: (row) => {
      opened.push(row.requestId);
      return gate;
    },
    finalise: async (record) => void records.push(record),
    keepsBodies: () => false,
    fullness: () => 0,
  };
  return { spool, records, opened, release: () => settle!.resolve(), fail: (err: Error) => settle!.reject(err) };
}

t.test('the upstream is called only once the open row is durable', async (t) => {
  const upstream = await startFakeUpstream(t);
  const gated = gatedOpenSpool();
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { spool: gated.spool } });
  const call = node.client().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'wait for the row' }] });
  await waitFor(() => gated.opened.length === 1, { what: 'the open row to be queued' });
  t.equal(upstream.requests.length, 0, 'nothing sent upstream while the row is not durable');
  gated.release();
  const answer = await call;
  t.equal(answer.model, 'echo');
  t.equal(upstream.requests.length, 1);
});

t.test('a request whose open row cannot be written is refused with ZN_ERR_SPOOL_FULL and never reaches the upstream', async (t) => {
  const upstream = await startFakeUpstream(t);
  const gated = gatedOpenSpool();
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { spool: gated.spool } });
  gated.fail(zenovaError('ZN_ERR_SPOOL_FULL', 'The node cannot write its request spool (disk full or failing); it accepts new requests once writes succeed again.'));
  const err = await sdkError(node.client().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'no row, no call' }] }));
  t.equal(err.status, 503);
  t.equal(err.code, 'ZN_ERR_SPOOL_FULL');
  t.equal(upstream.requests.length, 0, 'the upstream was not called');
  await waitFor(() => gated.records.length === 1, { what: 'the refusal to be recorded' });
  t.match(gated.records[0], { status: 'rejected', httpStatus: 503, errorCode: 'ZN_ERR_SPOOL_FULL', attempts: [] });
});
