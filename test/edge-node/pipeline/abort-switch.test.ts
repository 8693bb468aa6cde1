// The AbortSwitch every request and upstream attempt uses instead of an AbortController: the same
// contract undici relies on (aborted, reason, one 'abort' event), a reason made only when read.
import t from 'tap';
import { Pool } from 'undici';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { AbortSwitch } from '../../../edge-node/src/pipeline/abort-switch.js';

t.test('aborted without a reason, its reason is an AbortError, as an AbortController gives', async (t) => {
  const gone = new AbortSwitch();
  t.equal(gone.reason, undefined, 'no reason before it is aborted');
  let events = 0;
  gone.on('abort', () => (events += 1));
  gone.abort();
  gone.abort(new Error('second'));
  t.equal(gone.aborted, true);
  t.equal(events, 1, 'one abort event, however often abort is called');
  t.ok(gone.reason instanceof DOMException);
  t.equal((gone.reason as DOMException).name, 'AbortError');
  t.equal(gone.reason, gone.reason, 'the same reason each time it is read');
});

t.test('aborted with a reason, it keeps that reason', async (t) => {
  const gone = new AbortSwitch();
  const why = new Error('the caller left');
  gone.abort(why);
  t.equal(gone.reason, why);
});

t.test('undici takes it as a signal and aborts a request in flight with its reason', async (t) => {
  const server = createServer(() => undefined); // never answers
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const pool = new Pool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  t.teardown(async () => {
    await pool.destroy();
    server.closeAllConnections();
    server.close();
  });
  const gone = new AbortSwitch();
  const pending = pool.request({ method: 'GET', path: '/', signal: gone });
  setImmediate(() => gone.abort());
  const err = await pending.then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof Error, 'the request is rejected');
  t.equal((err as Error).name, 'AbortError');
});
