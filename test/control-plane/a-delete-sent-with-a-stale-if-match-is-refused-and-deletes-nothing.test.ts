// DELETE honours If-Match as PUT/PATCH do (http/if-match.ts): on every route that deletes one
// object with an ETag — a model route, an upstream, both policy kinds, a price, a tool server and a
// node — a stale If-Match is 412 ZN_ERR_CP_PRECONDITION_FAILED and deletes nothing (no config
// version), the current ETag (or its weak form, or "*") deletes, and without If-Match a delete is as
// before. A delete and an edit racing with the same If-Match — both queued behind a row lock held by
// another transaction, so both past any check made before their transaction — end with exactly one
// applied: the delete's check is made under the row lock, in the transaction that deletes.
// Same set-up as an-edit-sent-with-a-stale-if-match-is-refused-and-two-racing-edits-cannot-both-win.
import type { LightMyRequestResponse } from 'fastify';
import pg from 'pg';
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { configApp, etagOf, expectStatus, sendIfMatch, uniqueConfigName } from './config-harness.js';
import { migratedPool, validNodeBody } from './nodes-harness.js';

const db = await testDatabase(t);
const probe = await migratedPool(t, db.url);
const { app, call, version } = await configApp(t, db.url);

interface ErrorReply { error: { code: string; message: string } }

const send = sendIfMatch(app);

/** One kind of object: how to make one, the edit that changes it, and the SQL that row-locks it ($1 = key). */
interface Kind {
  kind: string;
  /** Creates the object; returns its URL (GET and DELETE), its edit URL and its key for lockSql. */
  create: () => Promise<{ url: string; editUrl: string; key: string }>;
  lockSql: string;
  method: 'PUT' | 'PATCH';
  edit: unknown;
  /** The refusal a GET (or an edit) of the object gets once it is deleted. */
  notFound: string;
}

const upstreamForRoutes = uniqueConfigName('up');
expectStatus(await call('POST', '/api/v1/upstreams', { name: upstreamForRoutes, kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1' }), 201);
const route = (model: string): Record<string, unknown> => ({ targets: [{ upstream: upstreamForRoutes, model }] });
const keywords = (word: string): Record<string, unknown> => ({ rules: [{ detector: 'keywords', keywords: [word], action: 'block', on: 'input' }] });
const price = (input: number): Record<string, unknown> => ({ inputMicrosPerToken: input, outputMicrosPerToken: 5 });
const tool = (timeoutMs: number): Record<string, unknown> => ({ url: 'http://127.0.0.1:9/mcp', timeoutMs });

const KINDS: Kind[] = [
  {
    kind: 'a model route (DELETE /routes/:alias)',
    create: async () => {
      const alias = uniqueConfigName('alias');
      expectStatus(await call('POST', '/api/v1/routes', { alias, ...route('m0') }), 201);
      return { url: `/api/v1/routes/${alias}`, editUrl: `/api/v1/routes/${alias}`, key: alias };
    },
    lockSql: 'select 1 from routes where alias = $1 and deleted_at is null for update',
    method: 'PUT',
    edit: route('m1'),
    notFound: 'ZN_ERR_CP_ROUTE_NOT_FOUND',
  },
  {
    kind: 'an upstream (DELETE /upstreams/:name)',
    create: async () => {
      const name = uniqueConfigName('up');
      expectStatus(await call('POST', '/api/v1/upstreams', { name, kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1' }), 201);
      return { url: `/api/v1/upstreams/${name}`, editUrl: `/api/v1/upstreams/${name}`, key: name };
    },
    lockSql: 'select 1 from upstreams where name = $1 and deleted_at is null for update',
    method: 'PATCH',
    edit: { timeoutMs: 1000 },
    notFound: 'ZN_ERR_CP_UPSTREAM_NOT_FOUND',
  },
  {
    kind: 'a rate-limit policy (DELETE /rate-limit-policies/:name)',
    create: async () => {
      const name = uniqueConfigName('rl');
      expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name, requestsPerMinute: 10 }), 201);
      return { url: `/api/v1/rate-limit-policies/${name}`, editUrl: `/api/v1/rate-limit-policies/${name}`, key: name };
    },
    lockSql: 'select 1 from rate_limit_policies where name = $1 and deleted_at is null for update',
    method: 'PUT',
    edit: { requestsPerMinute: 11 },
    notFound: 'ZN_ERR_CP_POLICY_NOT_FOUND',
  },
  {
    kind: 'a guardrail policy (DELETE /guardrail-policies/:name)',
    create: async () => {
      const name = uniqueConfigName('gr');
      expectStatus(await call('POST', '/api/v1/guardrail-policies', { name, ...keywords('zero') }), 201);
      return { url: `/api/v1/guardrail-policies/${name}`, editUrl: `/api/v1/guardrail-policies/${name}`, key: name };
    },
    lockSql: 'select 1 from guardrail_policies where name = $1 and deleted_at is null for update',
    method: 'PUT',
    edit: keywords('one'),
    notFound: 'ZN_ERR_CP_POLICY_NOT_FOUND',
  },
  {
    kind: 'a price (DELETE /prices/:model)',
    create: async () => {
      const model = uniqueConfigName('model');
      expectStatus(await call('PUT', `/api/v1/prices/${model}`, price(1)), 200);
      return { url: `/api/v1/prices/${model}`, editUrl: `/api/v1/prices/${model}`, key: model };
    },
    lockSql: 'select 1 from prices where model = $1 for update',
    method: 'PUT',
    edit: price(2),
    notFound: 'ZN_ERR_CP_PRICE_NOT_FOUND',
  },
  {
    kind: 'a tool server (DELETE /tool-servers/:name)',
    create: async () => {
      const name = uniqueConfigName('tools');
      expectStatus(await call('PUT', `/api/v1/tool-servers/${name}`, tool(1000)), 201);
      return { url: `/api/v1/tool-servers/${name}`, editUrl: `/api/v1/tool-servers/${name}`, key: name };
    },
    lockSql: 'select 1 from tool_servers where name = $1 and deleted_at is null for update',
    method: 'PUT',
    edit: tool(2000),
    notFound: 'ZN_ERR_CP_TOOL_SERVER_NOT_FOUND',
  },
  {
    kind: 'a node (DELETE /nodes/:name)',
    create: async () => {
      const body = validNodeBody();
      expectStatus(await call('POST', '/api/v1/nodes', body), 201);
      return { url: `/api/v1/nodes/${body.name as string}`, editUrl: `/api/v1/nodes/${body.name as string}/settings`, key: body.name as string };
    },
    lockSql: 'select 1 from nodes where name = $1 and deleted_at is null for update',
    method: 'PATCH',
    edit: { spoolQuotaGb: 20 },
    notFound: 'ZN_ERR_CP_NODE_NOT_FOUND',
  },
];

async function etagNow(url: string): Promise<string> {
  const res = await send('GET', url);
  expectStatus(res, 200);
  return etagOf(res);
}

for (const k of KINDS) {
  t.test(`${k.kind}: a stale If-Match is refused 412 and deletes nothing; the current ETag deletes`, async (t) => {
    const { url, editUrl } = await k.create();
    const first = await etagNow(url);
    const edited = await send(k.method, editUrl, k.edit, first);
    t.equal(edited.statusCode, 200, edited.body);
    const current = etagOf(edited);
    t.not(current, first, 'the edit changed the ETag');

    const versionBefore = await version();
    for (const stale of [first, `W/${first}`, '"not-it"']) {
      const res = await send('DELETE', url, undefined, stale);
      t.equal(res.statusCode, 412, `${stale}: ${res.body}`);
      t.equal(res.json<ErrorReply>().error.code, 'ZN_ERR_CP_PRECONDITION_FAILED');
      t.match(res.json<ErrorReply>().error.message, /changed since it was read.*nothing was deleted/i);
    }
    t.equal(await etagNow(url), current, 'still there, as it was');
    t.equal(await version(), versionBefore, 'no config version recorded');

    // A compressing reverse proxy passes the ETag on as W/"…", and a client sends back what it got.
    const deleted = await send('DELETE', url, undefined, `"not-it", W/${current}`);
    t.equal(deleted.statusCode, 200, `a list naming the current ETag (weak) deletes: ${deleted.body}`);
    const gone = await send('GET', url);
    t.equal(gone.statusCode, 404);
    t.equal(gone.json<ErrorReply>().error.code, k.notFound);
    const again = await send('DELETE', url, undefined, current);
    t.equal(again.statusCode, 404, `a deleted object stays its kind's 404 with If-Match: ${again.body}`);
    t.equal(again.json<ErrorReply>().error.code, k.notFound);
  });

  t.test(`${k.kind}: without If-Match, or with "*", a DELETE deletes as before; a malformed one is 400`, async (t) => {
    const plain = await k.create();
    for (const malformed of ['not-quoted', '*, "x"']) {
      const res = await send('DELETE', plain.url, undefined, malformed);
      t.equal(res.statusCode, 400, `${malformed}: ${res.body}`);
      t.match(res.json<ErrorReply>().error.message, /^If-Match: must be/);
    }
    expectStatus(await send('GET', plain.url), 200);
    t.equal((await send('DELETE', plain.url)).statusCode, 200, 'no If-Match: deleted');
    const any = await k.create();
    t.equal((await send('DELETE', any.url, undefined, '*')).statusCode, 200, '"*" matches the existing object');
    t.equal((await send('GET', any.url)).statusCode, 404);
  });

  for (const first of ['edit', 'delete'] as const) {
    t.test(`${k.kind}: a delete and an edit racing with the same If-Match, the ${first} queued first: exactly one applies`, async (t) => {
      const { url, editUrl, key } = await k.create();
      const etag = await etagNow(url);
      // Both queue behind this lock, so both are past anything checked before their transaction; the
      // row lock is granted in the order they queued, so which one wins is known.
      const blocker = new pg.Client({ connectionString: db.url });
      await blocker.connect();
      t.teardown(() => blocker.end());
      await blocker.query('begin');
      t.equal((await blocker.query(k.lockSql, [key])).rowCount, 1, 'the row is locked');
      const waiting = (n: number, what: string): Promise<unknown> => waitFor(async () => {
        // Not on the blocker: its transaction would see one snapshot of pg_stat_activity throughout.
        const { rows } = await probe.query<{ n: number }>(
          "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'",
        );
        return rows[0]!.n >= n;
      }, { what });
      const sendDelete = (): Promise<LightMyRequestResponse> => send('DELETE', url, undefined, etag);
      const sendEdit = (): Promise<LightMyRequestResponse> => send(k.method, editUrl, k.edit, etag);
      const earlier = first === 'edit' ? sendEdit() : sendDelete();
      await waiting(1, `the ${first} waiting on the row lock`);
      const later = first === 'edit' ? sendDelete() : sendEdit();
      await waiting(2, 'both waiting on the row lock');
      await blocker.query('commit');
      const [a, b] = await Promise.all([earlier, later]);
      const [edited, deleted] = first === 'edit' ? [a, b] : [b, a];
      const after = await send('GET', url);
      if (first === 'edit') {
        t.equal(edited.statusCode, 200, `the edit applies: ${edited.body}`);
        t.equal(deleted.statusCode, 412, `the delete, holding the ETag the edit replaced, is refused: ${deleted.body}`);
        t.equal(deleted.json<ErrorReply>().error.code, 'ZN_ERR_CP_PRECONDITION_FAILED');
        t.equal(after.statusCode, 200, 'the object stands');
        t.equal(etagOf(after), etagOf(edited), "with the edit's ETag");
      } else {
        t.equal(deleted.statusCode, 200, `the delete applies: ${deleted.body}`);
        // The edit then finds no object: its kind's 404, or 412 where a PUT would create (price, tool server).
        t.ok([404, 412].includes(edited.statusCode), `the edit writes nothing: ${edited.statusCode} ${edited.body}`);
        t.equal(after.statusCode, 404, 'the object is gone, not re-created');
      }
    });
  }
}
