// A tools/call the tool server got runs there whether or not anyone reads its answer (a closed
// connection does not stop a tool; in JSON answer mode the headers come only once it ran): once
// delivered it is charged, also when the caller leaves, the answer times out or the connection
// fails before or during the answer, and the record still says aborted or failed. The lease is
// charged from the reservation like any answer. A connection lost after delivery is not to be
// resent by an SDK (x-should-retry: false): the tool may have run.
import t from 'tap';
import { waitFor } from '../../fixtures/wait-for.js';
import { CALL_MICROS, postTo, rawToolServer, startPricedToolNode, toolCall } from './priced-tool-node.js';

t.test('a tools/call the caller abandons once the tool server has it is charged, and recorded aborted', async (t) => {
  // The tool runs "for ever": its JSON answer, headers included, would come only when it is done.
  const tool = await rawToolServer(t, () => undefined);
  const node = await startPricedToolNode(t, tool.url);
  const caller = new AbortController();
  const pending = postTo(node, toolCall(1), caller.signal).catch(() => 'aborted');
  await waitFor(() => tool.bodies.length === 1, { what: 'the tool server to have the whole call' });
  caller.abort();
  t.equal(await pending, 'aborted');
  await waitFor(() => node.records.length === 1 && node.lease().reserved === 0, { what: 'the record and the reservation settled' });
  t.match(node.records[0], {
    status: 'aborted', httpStatus: 499, upstream: 'tools', upstreamModel: 'tools/call',
    cost: { reservedMicros: CALL_MICROS, costMicros: CALL_MICROS, leaseId: 'lease-1' },
    attempts: [{ outcome: 'aborted', httpStatus: null }],
  });
  t.equal(node.lease().spent, CALL_MICROS, 'the lease is charged the call');
});

t.test('a batch of tools/call the tool server got but did not answer in time is charged for each call, and recorded as a timeout', async (t) => {
  const tool = await rawToolServer(t, () => undefined);
  const node = await startPricedToolNode(t, tool.url, { timeoutMs: 500 });
  const res = await postTo(node, [toolCall(1), toolCall(2), toolCall(3)]);
  t.equal(res.status, 504);
  t.equal(res.headers.get('x-should-retry'), 'false', 'the calls may still run: an SDK must not resend them on its own');
  t.match(await res.json(), { error: { code: 'ZN_ERR_UPSTREAM_TIMEOUT', message: /may still be running/ } });
  await waitFor(() => node.records.length === 1 && node.lease().reserved === 0, { what: 'the record and the reservation settled' });
  t.equal(tool.bodies.length, 1, 'the tool server had the batch');
  t.match(node.records[0], {
    status: 'failed', httpStatus: 504, errorCode: 'ZN_ERR_UPSTREAM_TIMEOUT', upstream: 'tools', upstreamModel: 'batch',
    cost: { reservedMicros: 3 * CALL_MICROS, costMicros: 3 * CALL_MICROS },
    attempts: [{ outcome: 'timeout', httpStatus: null }],
  });
  t.equal(node.lease().spent, 3 * CALL_MICROS);
});

t.test('a tools/call whose JSON answer stalls after its headers is charged, and recorded as a timeout', async (t) => {
  const tool = await rawToolServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '1000' });
    res.write('{"jsonrpc":"2.0","id":1,');
  });
  const node = await startPricedToolNode(t, tool.url, { timeoutMs: 1000 });
  const res = await postTo(node, toolCall(1));
  t.equal(res.status, 504);
  t.equal(res.headers.get('x-should-retry'), 'false');
  await res.text();
  await waitFor(() => node.records.length === 1 && node.lease().reserved === 0, { what: 'the record and the reservation settled' });
  t.match(node.records[0], {
    status: 'failed', httpStatus: 504, errorCode: 'ZN_ERR_UPSTREAM_TIMEOUT',
    cost: { costMicros: CALL_MICROS }, attempts: [{ outcome: 'timeout', httpStatus: 200 }],
  });
  t.equal(node.lease().spent, CALL_MICROS);
});

// The tool server took the call and answered 2xx, then its connection failed mid-answer: the tool ran.
for (const mode of ['json', 'event-stream'] as const) {
  t.test(`a tools/call whose 2xx ${mode} answer is cut by a reset is charged`, async (t) => {
    const tool = await rawToolServer(t, (_req, res) => {
      res.writeHead(200, mode === 'json' ? { 'content-type': 'application/json', 'content-length': '1000' } : { 'content-type': 'text/event-stream' });
      res.write(`${mode === 'json' ? '' : 'event: message\ndata: '}{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"do`, () => res.socket?.destroy());
    });
    const node = await startPricedToolNode(t, tool.url);
    const res = await postTo(node, toolCall(1));
    const body = await res.text().catch(() => 'cut');
    await waitFor(() => node.records.length === 1 && node.lease().reserved === 0, { what: 'the record and the reservation settled' });
    t.match(node.records[0], { status: 'failed', upstream: 'tools', cost: { reservedMicros: CALL_MICROS, costMicros: CALL_MICROS } });
    t.equal(node.lease().spent, CALL_MICROS, 'the lease is charged the call');
    if (mode === 'json') {
      // Its headers were not relayed yet: the caller is told the call may have run, and not to resend it blindly.
      t.equal(res.status, 502);
      t.equal(res.headers.get('x-should-retry'), 'false');
      t.match(JSON.parse(body), { error: { code: 'ZN_ERR_UPSTREAM_UNAVAILABLE', message: /closed the connection after receiving the call/ } });
      t.match(node.records[0], { httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_UNAVAILABLE', attempts: [{ outcome: 'error', httpStatus: 200 }] });
    }
  });
}

t.test('a tools/call whose 2xx JSON answer is over the 32 MiB bound is charged, and not to be resent', async (t) => {
  const tool = await rawToolServer(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text', text: 'x'.repeat(33 * 1024 * 1024) }] } }));
  });
  const node = await startPricedToolNode(t, tool.url);
  const res = await postTo(node, toolCall(1));
  t.equal(res.status, 502);
  t.equal(res.headers.get('x-should-retry'), 'false');
  t.match(await res.json(), { error: { code: 'ZN_ERR_UPSTREAM_ERROR' } });
  await waitFor(() => node.records.length === 1 && node.lease().reserved === 0, { what: 'the record and the reservation settled' });
  t.match(node.records[0], { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_ERROR', cost: { costMicros: CALL_MICROS } });
  t.equal(node.lease().spent, CALL_MICROS);
});

t.test('a tools/call the tool server had whole, whose connection reset before its headers, is charged and not to be resent', async (t) => {
  const tool = await rawToolServer(t, (_req, res) => res.socket?.destroy());
  const node = await startPricedToolNode(t, tool.url);
  const res = await postTo(node, toolCall(1));
  t.equal(res.status, 502);
  t.equal(res.headers.get('x-should-retry'), 'false', 'the tool may have run: an SDK must not run it twice');
  t.match(await res.json(), { error: { code: 'ZN_ERR_UPSTREAM_UNAVAILABLE', message: /Tool server "tools" closed the connection after receiving the call/ } });
  await waitFor(() => node.records.length === 1 && node.lease().reserved === 0, { what: 'the record and the reservation settled' });
  t.equal(tool.bodies.length, 1, 'the tool server had the call');
  t.match(node.records[0], {
    status: 'failed', httpStatus: 502, errorCode: 'ZN_ERR_UPSTREAM_UNAVAILABLE', upstream: 'tools',
    cost: { costMicros: CALL_MICROS }, attempts: [{ outcome: 'error', httpStatus: null }],
  });
  t.equal(node.lease().spent, CALL_MICROS);
});

t.test('a GET stream whose connection resets before its headers is still retryable and costs nothing', async (t) => {
  const tool = await rawToolServer(t, (_req, res) => res.socket?.destroy());
  const node = await startPricedToolNode(t, tool.url);
  const res = await fetch(node.url, { headers: { ...node.auth, accept: 'text/event-stream' } });
  t.equal(res.status, 502);
  t.equal(res.headers.get('x-should-retry'), 'true', 'reopening an event stream runs nothing twice');
  t.match(await res.json(), { error: { code: 'ZN_ERR_UPSTREAM_UNAVAILABLE', message: /could not be reached/ } });
  await waitFor(() => node.records.length === 1, { what: 'the record' });
  t.match(node.records[0], { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_UNAVAILABLE', cost: { costMicros: 0 } });
});
