// The 412 ZN_ERR_CP_PRECONDITION_FAILED message fits the request it refuses (http/if-match.ts): a
// DELETE sent with a stale If-Match is told nothing was deleted and to re-read and send the delete
// again (never to "apply the edit again"); a stale edit (PATCH, PUT) keeps the edit wording, and so
// does a PUT with If-Match that would create. Shown on an upstream and a tool server, with the
// object left as it was. Same set-up as a-delete-sent-with-a-stale-if-match-is-refused-and-deletes-nothing.
import type { LightMyRequestResponse } from 'fastify';
import t from 'tap';
import type { Test } from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { configApp, etagOf, expectStatus, sendIfMatch, uniqueConfigName } from './config-harness.js';
import { migratedPool } from './nodes-harness.js';

const db = await testDatabase(t);
await migratedPool(t, db.url);
const { app, call, version } = await configApp(t, db.url);
const send = sendIfMatch(app);

interface ErrorReply { error: { code: string; message: string } }

const DELETE_WORDING = /^If-Match: the object changed since it was read \(its ETag is no longer the one sent\); nothing was deleted\. Re-read it \(GET\) and, if it should still go, send the delete again with its new ETag\.$/;
const EDIT_WORDING = /^If-Match: the object changed since it was read \(its ETag is no longer the one sent\); nothing was written\. Re-read it \(GET\) and apply the edit again with its new ETag\.$/;

function refusal(t: Test, res: LightMyRequestResponse, what: string): string {
  t.equal(res.statusCode, 412, `${what}: 412`);
  const error = res.json<ErrorReply>().error;
  t.equal(error.code, 'ZN_ERR_CP_PRECONDITION_FAILED', `${what}: the code`);
  return error.message;
}

const KINDS = [
  {
    kind: 'an upstream',
    create: async (): Promise<string> => {
      const name = uniqueConfigName('up');
      expectStatus(await call('POST', '/api/v1/upstreams', { name, kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1' }), 201);
      return `/api/v1/upstreams/${name}`;
    },
    editMethod: 'PATCH' as const,
    edits: [{ timeoutMs: 1000 }, { timeoutMs: 2000 }],
  },
  {
    kind: 'a tool server',
    create: async (): Promise<string> => {
      const url = `/api/v1/tool-servers/${uniqueConfigName('tools')}`;
      expectStatus(await call('PUT', url, { url: 'http://127.0.0.1:9/mcp' }), 201);
      return url;
    },
    editMethod: 'PUT' as const,
    edits: [{ url: 'http://127.0.0.1:9/mcp', timeoutMs: 1000 }, { url: 'http://127.0.0.1:9/mcp', timeoutMs: 2000 }],
  },
];

for (const k of KINDS) {
  t.test(`${k.kind}: a stale If-Match on DELETE says nothing was deleted; on an edit, nothing was written`, async (t) => {
    const url = await k.create();
    const read = await send('GET', url);
    expectStatus(read, 200);
    const first = etagOf(read);
    expectStatus(await send(k.editMethod, url, k.edits[0], first), 200);
    const current = await send('GET', url);
    const before = await version();

    const staleDelete = await send('DELETE', url, undefined, first);
    const deleteMessage = refusal(t, staleDelete, 'the stale DELETE');
    t.match(deleteMessage, DELETE_WORDING, 'the DELETE is told nothing was deleted and to send the delete again');
    t.notMatch(deleteMessage, /edit|written/, 'the DELETE is not told about an edit');

    const staleEdit = await send(k.editMethod, url, k.edits[1], first);
    t.match(refusal(t, staleEdit, `the stale ${k.editMethod}`), EDIT_WORDING, 'the edit keeps the edit wording');

    const after = await send('GET', url);
    t.equal(after.statusCode, 200, 'the object is still there');
    t.equal(etagOf(after), etagOf(current), 'and unchanged');
    t.equal(await version(), before, 'no config version recorded');

    const again = await send('DELETE', url, undefined, etagOf(after));
    t.equal(again.statusCode, 200, 'the delete sent again with the new ETag deletes');
  });
}

t.test('a PUT with If-Match that would create a tool server keeps the edit wording', async (t) => {
  const url = `/api/v1/tool-servers/${uniqueConfigName('tools')}`;
  const res = await send('PUT', url, { url: 'http://127.0.0.1:9/mcp' }, '*');
  t.match(refusal(t, res, 'the creating PUT'), /^If-Match: the object does not exist .*nothing was written\. Re-read it and apply the edit again\.$/);
  t.equal((await send('GET', url)).statusCode, 404, 'nothing created');
});
