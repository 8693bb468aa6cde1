// A tools/call the tool server got runs there whether or not anyone reads its answer (a closed
// connection does not stop a tool; in JSON answer mode the headers come only once it ran): once
// delivered it is charged, also when the caller leaves or the answer times out, and the record
// still says aborted or timed out. The lease is charged from the reservation like any answer.
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
  t.match(await res.json(), { error: { code: 'ZN_ERR_UPSTREAM_TIMEOUT' } });
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
  await res.text();
  await waitFor(() => node.records.length === 1 && node.lease().reserved === 0, { what: 'the record and the reservation settled' });
  t.match(node.records[0], {
    status: 'failed', httpStatus: 504, errorCode: 'ZN_ERR_UPSTREAM_TIMEOUT',
    cost: { costMicros: CALL_MICROS }, attempts: [{ outcome: 'timeout', httpStatus: 200 }],
  });
  t.equal(node.lease().spent, CALL_MICROS);
});
