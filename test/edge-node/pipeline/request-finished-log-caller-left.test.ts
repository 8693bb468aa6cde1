// The one "request finished" line of a caller that leaves mid-answer says what its record and the
// metrics say (outcome aborted, 499 for a JSON answer never sent, key, model, upstream, the usage
// billed), not what was known when its response closed: it is written once the pipeline run has
// settled too (its end, or its record stamped again while the record's commit waits). Requests
// that never reach the pipeline (a 404) still get theirs at once, and a run that never settles has
// its line written at the app's close. Each request gets exactly one line.
import t from 'tap';
import type { Test } from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import type { RequestSpool } from '../../../edge-node/src/spool/request-spool.js';
import { startFakeUpstream } from '../../fixtures/fake-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { startPipelineNode } from './pipeline-harness.js';
import type { PipelineNode } from './pipeline-harness.js';

type Line = Record<string, unknown> & { usage?: { inputTokens: number; outputTokens: number; estimated: boolean } };

function finishedLines(node: PipelineNode): Line[] {
  return node.logs().filter((l) => l.msg === 'request finished');
}

function chat(node: PipelineNode, stream: boolean, signal: AbortSignal): Promise<Response> {
  return fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` },
    body: JSON.stringify({ model: 'echo', stream, messages: [{ role: 'user', content: 'a prompt of a few words for the upstream to count' }] }),
    signal,
  });
}

/** After the app's close (which writes any line still waiting), the request has exactly one line. */
async function exactlyOneLineAfterClose(t: Test, node: PipelineNode): Promise<void> {
  await node.app.close();
  t.equal(finishedLines(node).length, 1, 'exactly one "request finished" line');
}

t.test('a JSON caller that leaves while the upstream is answering gets a line saying aborted 499 with its key, model, upstream and billed prompt', async (t) => {
  const upstream = await startFakeUpstream(t, { hang: true });
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const gone = new AbortController();
  const pending = chat(node, false, gone.signal).catch((err: unknown) => err);
  await waitFor(() => upstream.requests.length === 1, { what: 'the call to reach the upstream' });
  gone.abort();
  await pending;
  const done = await waitFor(() => node.finished[0], { what: 'the request to finish' });
  const line = await waitFor(() => finishedLines(node)[0], { what: 'the request finished line' });
  t.equal(done.outcome.status, 'aborted', 'the metrics see it aborted');
  t.match(line, { requestId: done.requestId, status: 499, outcome: 'aborted', callerAborted: true, keyId: 'key-a', model: 'echo', upstream: 'demo' });
  t.ok(done.usage.inputTokens > 0, 'the prompt is billed');
  t.same(line.usage, { inputTokens: done.usage.inputTokens, outputTokens: 0, estimated: true }, 'the line has the usage billed: the prompt estimate, no output');
  await exactlyOneLineAfterClose(t, node);
});

t.test('a stream caller that leaves after two events gets a line saying aborted with the output it was billed', async (t) => {
  const upstream = await startFakeUpstream(t, { chunkDelayMs: 150 });
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const gone = new AbortController();
  const res = await chat(node, true, gone.signal);
  const reader = res.body!.getReader();
  let received = '';
  while (received.split('\n\n').length <= 2) {
    const { value, done } = await reader.read();
    if (done) break;
    received += Buffer.from(value).toString('utf8');
  }
  gone.abort();
  const done = await waitFor(() => node.finished[0], { what: 'the request to finish' });
  const line = await waitFor(() => finishedLines(node)[0], { what: 'the request finished line' });
  t.equal(done.outcome.status, 'aborted');
  t.ok(done.usage.outputTokens > 0, 'the metrics count the output it got');
  t.match(line, { requestId: res.headers.get('x-request-id'), status: 200, outcome: 'aborted', callerAborted: true, keyId: 'key-a', model: 'echo', upstream: 'demo', stream: true });
  t.same(line.usage, { inputTokens: done.usage.inputTokens, outputTokens: done.usage.outputTokens, estimated: done.usage.estimated }, 'the line has the usage the metrics and the record have');
  await exactlyOneLineAfterClose(t, node);
});

t.test('a request answered in full has its line as before: status 200, no outcome, its usage', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const res = await chat(node, false, new AbortController().signal);
  t.equal(res.status, 200);
  await res.text();
  const done = await waitFor(() => node.finished[0], { what: 'the request to finish' });
  const line = await waitFor(() => finishedLines(node)[0], { what: 'the request finished line' });
  t.match(line, { requestId: done.requestId, status: 200, keyId: 'key-a', model: 'echo', upstream: 'demo', stream: false });
  t.notOk('outcome' in line, 'no outcome for an answer delivered');
  t.notOk('callerAborted' in line);
  t.same(line.usage, { inputTokens: done.usage.inputTokens, outputTokens: done.usage.outputTokens, estimated: done.usage.estimated });
  await exactlyOneLineAfterClose(t, node);
});

t.test('a path no route serves gets its 404 line at once, and only one', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const res = await fetch(`${node.origin}/no/such/path`);
  t.equal(res.status, 404);
  await res.text();
  const line = await waitFor(() => finishedLines(node)[0], { what: 'the 404\'s line' });
  t.match(line, { status: 404, path: '/no/such/path', errorCode: 'ZN_ERR_NOT_FOUND' });
  await exactlyOneLineAfterClose(t, node);
});

/** A spool whose final records wait until released (a commit that never comes, as on a full disk); no restamping. */
function heldSpool(): { spool: RequestSpool; held: () => number; release: () => void } {
  const waiting: Array<() => void> = [];
  return {
    spool: {
      open: () => undefined,
      finalise: (_record: RequestRecord) => new Promise<void>((resolve) => waiting.push(resolve)),
      keepsBodies: () => false,
      fullness: () => 0,
    },
    held: () => waiting.length,
    release: () => {
      for (const resolve of waiting.splice(0)) resolve();
    },
  };
}

/** A spool whose final records wait until released, stamped again (as the real spool does) when asked. */
function stampingHeldSpool(): { spool: RequestSpool; held: () => number; stamped: RequestRecord[]; release: () => void } {
  const held = heldSpool();
  const restamps = new Map<string, () => RequestRecord | undefined>();
  const stamped: RequestRecord[] = [];
  return {
    spool: {
      ...held.spool,
      onUndelivered: (requestId, restamp) => {
        restamps.set(requestId, restamp);
        return () => restamps.delete(requestId);
      },
      stampUndelivered: () => {
        let count = 0;
        for (const restamp of restamps.values()) {
          const record = restamp();
          if (record !== undefined) {
            stamped.push(record);
            count += 1;
          }
        }
        return count;
      },
    },
    held: held.held,
    stamped,
    release: held.release,
  };
}

t.test('a JSON caller that leaves while its record waits for its commit gets its line when the record is stamped again, before the commit comes', async (t) => {
  const upstream = await startFakeUpstream(t);
  const commits = stampingHeldSpool();
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { spool: commits.spool } });
  const gone = new AbortController();
  const pending = chat(node, false, gone.signal).catch((err: unknown) => err);
  await waitFor(() => commits.held() === 1, { what: 'the answer to wait for its record\'s commit' });
  gone.abort();
  await pending;
  const line = await waitFor(() => finishedLines(node)[0], { what: 'the request finished line' });
  t.equal(node.finished.length, 0, 'the run still waits for the commit');
  t.equal(commits.stamped.length, 1, 'the record was stamped again');
  const record = commits.stamped[0]!;
  t.match(record, { status: 'aborted', httpStatus: 499, keyId: 'key-a', model: 'echo', upstream: 'demo' });
  t.match(line, { requestId: record.requestId, status: 499, outcome: 'aborted', callerAborted: true, keyId: 'key-a', model: 'echo', upstream: 'demo' });
  t.notOk('runUnsettled' in line);
  t.same(line.usage, record.usage, 'the line has the usage the record has');
  t.equal(line.usage?.outputTokens, 0, 'no output billed: the answer never went out');
  commits.release();
  const done = await waitFor(() => node.finished[0], { what: 'the run to end once its commit came' });
  t.same(line.usage, { inputTokens: done.usage.inputTokens, outputTokens: done.usage.outputTokens, estimated: done.usage.estimated }, 'the line has the usage the metrics have');
  await exactlyOneLineAfterClose(t, node);
});

t.test('a line whose pipeline run never settles is written at the app\'s close, 499, and not again when the run ends', async (t) => {
  const upstream = await startFakeUpstream(t);
  const commits = heldSpool();
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, services: { spool: commits.spool } });
  const gone = new AbortController();
  const pending = chat(node, false, gone.signal).catch((err: unknown) => err);
  await waitFor(() => commits.held() === 1, { what: 'the answer to wait for its record\'s commit' });
  gone.abort();
  await pending;
  await waitFor(() => node.app.inFlight.size === 0, { what: 'the node to see its caller leave' });
  t.equal(finishedLines(node).length, 0, 'no line while the run goes on');
  await node.app.close();
  const lines = finishedLines(node);
  t.equal(lines.length, 1, 'the close writes it');
  t.match(lines[0], { status: 499, callerAborted: true, runUnsettled: true, keyId: 'key-a', model: 'echo' });
  commits.release();
  await waitFor(() => node.finished.length === 1, { what: 'the run to end once its commit came' });
  t.equal(finishedLines(node).length, 1, 'still exactly one line');
});
