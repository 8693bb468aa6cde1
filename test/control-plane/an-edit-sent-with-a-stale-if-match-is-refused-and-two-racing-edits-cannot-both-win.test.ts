// Optimistic concurrency on the admin API (http/if-match.ts): every single object's GET and every
// PUT/PATCH reply carries a strong ETag of its stored state; an edit sent with an If-Match that is
// no longer current is refused 412 ZN_ERR_CP_PRECONDITION_FAILED and writes nothing; two edits
// racing with the same If-Match — both queued behind a row lock held by another transaction, so
// both are past any check made before their transaction — end in exactly one 200 and one 412. One
// table drives every kind: model routes, upstreams, accounts, both policy kinds, node settings and
// network, prices and tool servers. Without If-Match an edit behaves as before.
import pg from 'pg';
import t from 'tap';
import { MAX_IF_MATCH_LENGTH } from '../../control-plane/src/http/if-match.js';
import { testDatabase } from '../fixtures/postgres.js';
import { waitFor } from '../fixtures/wait-for.js';
import { configApp, etagOf, expectStatus, sendIfMatch, uniqueConfigName } from './config-harness.js';
import { migratedPool, validNodeBody } from './nodes-harness.js';

const db = await testDatabase(t);
const probe = await migratedPool(t, db.url);
const { app, call, version } = await configApp(t, db.url);

interface ErrorReply { error: { code: string; message: string; param: string | null } }

const ETAG = /^"[A-Za-z0-9_-]{43}"$/;

const send = sendIfMatch(app);

/** One kind of object: how to make one, where it is read and edited, and three edits that each change it. */
interface Kind {
  kind: string;
  /** Creates the object; returns its GET URL, its edit URL and the SQL that row-locks it ($1 = key). */
  create: () => Promise<{ url: string; editUrl: string; key: string }>;
  lockSql: string;
  method: 'PUT' | 'PATCH';
  edits: [unknown, unknown, unknown];
  /** The part of the GET body the edits set. */
  state: (body: Record<string, unknown>) => unknown;
}

const upstreamForRoutes = uniqueConfigName('up');
expectStatus(await call('POST', '/api/v1/upstreams', { name: upstreamForRoutes, kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1' }), 201);
const policyForAccounts = uniqueConfigName('rl');
expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name: policyForAccounts, requestsPerMinute: 60 }), 201);

const route = (model: string): Record<string, unknown> => ({ targets: [{ upstream: upstreamForRoutes, model }] });
const keywords = (word: string): Record<string, unknown> => ({ rules: [{ detector: 'keywords', keywords: [word], action: 'block', on: 'input' }] });
const price = (input: number): Record<string, unknown> => ({ inputMicrosPerToken: input, outputMicrosPerToken: 5 });
const tool = (timeoutMs: number): Record<string, unknown> => ({ url: 'http://127.0.0.1:9/mcp', timeoutMs });

const KINDS: Kind[] = [
  {
    kind: 'a model route (PUT /routes/:alias)',
    create: async () => {
      const alias = uniqueConfigName('alias');
      expectStatus(await call('POST', '/api/v1/routes', { alias, ...route('m0') }), 201);
      return { url: `/api/v1/routes/${alias}`, editUrl: `/api/v1/routes/${alias}`, key: alias };
    },
    lockSql: 'select 1 from routes where alias = $1 and deleted_at is null for update',
    method: 'PUT',
    edits: [route('m1'), route('m2'), route('m3')],
    state: (b) => b.targets,
  },
  {
    kind: 'an upstream (PATCH /upstreams/:name)',
    create: async () => {
      const name = uniqueConfigName('up');
      expectStatus(await call('POST', '/api/v1/upstreams', { name, kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1' }), 201);
      return { url: `/api/v1/upstreams/${name}`, editUrl: `/api/v1/upstreams/${name}`, key: name };
    },
    lockSql: 'select 1 from upstreams where name = $1 and deleted_at is null for update',
    method: 'PATCH',
    edits: [{ timeoutMs: 1000 }, { timeoutMs: 2000 }, { timeoutMs: 3000 }],
    state: (b) => b.timeoutMs,
  },
  {
    kind: 'an account (PATCH /accounts/:name)',
    create: async () => {
      const name = uniqueConfigName('acct');
      expectStatus(await call('POST', '/api/v1/accounts', { name }), 201);
      return { url: `/api/v1/accounts/${name}`, editUrl: `/api/v1/accounts/${name}`, key: name };
    },
    lockSql: 'select 1 from accounts where name = $1 and deleted_at is null for update',
    method: 'PATCH',
    edits: [{ rateLimitPolicy: policyForAccounts }, { status: 'suspended' }, { status: 'suspended', rateLimitPolicy: null }],
    state: (b) => [b.status, b.rateLimitPolicy],
  },
  {
    kind: 'a rate-limit policy (PUT /rate-limit-policies/:name)',
    create: async () => {
      const name = uniqueConfigName('rl');
      expectStatus(await call('POST', '/api/v1/rate-limit-policies', { name, requestsPerMinute: 10 }), 201);
      return { url: `/api/v1/rate-limit-policies/${name}`, editUrl: `/api/v1/rate-limit-policies/${name}`, key: name };
    },
    lockSql: 'select 1 from rate_limit_policies where name = $1 and deleted_at is null for update',
    method: 'PUT',
    edits: [{ requestsPerMinute: 11 }, { requestsPerMinute: 12 }, { requestsPerMinute: 13 }],
    state: (b) => b.requestsPerMinute,
  },
  {
    kind: 'a guardrail policy (PUT /guardrail-policies/:name)',
    create: async () => {
      const name = uniqueConfigName('gr');
      expectStatus(await call('POST', '/api/v1/guardrail-policies', { name, ...keywords('zero') }), 201);
      return { url: `/api/v1/guardrail-policies/${name}`, editUrl: `/api/v1/guardrail-policies/${name}`, key: name };
    },
    lockSql: 'select 1 from guardrail_policies where name = $1 and deleted_at is null for update',
    method: 'PUT',
    edits: [keywords('one'), keywords('two'), keywords('three')],
    state: (b) => b.rules,
  },
  {
    kind: "a node's settings (PATCH /nodes/:name/settings)",
    create: async () => {
      const body = validNodeBody();
      expectStatus(await call('POST', '/api/v1/nodes', body), 201);
      return { url: `/api/v1/nodes/${body.name as string}`, editUrl: `/api/v1/nodes/${body.name as string}/settings`, key: body.name as string };
    },
    lockSql: 'select 1 from nodes where name = $1 and deleted_at is null for update',
    method: 'PATCH',
    edits: [{ spoolQuotaGb: 20 }, { spoolQuotaGb: 30 }, { spoolQuotaGb: 40 }],
    state: (b) => b.spoolQuotaGb,
  },
  {
    kind: "a node's network (PATCH /nodes/:name/network)",
    create: async () => {
      const body = validNodeBody();
      expectStatus(await call('POST', '/api/v1/nodes', body), 201);
      return { url: `/api/v1/nodes/${body.name as string}`, editUrl: `/api/v1/nodes/${body.name as string}/network`, key: body.name as string };
    },
    lockSql: 'select 1 from nodes where name = $1 and deleted_at is null for update',
    method: 'PATCH',
    edits: [{ address: 'one.example.com' }, { address: 'two.example.com' }, { address: 'three.example.com' }],
    state: (b) => b.address,
  },
  {
    kind: 'a price (PUT /prices/:model)',
    create: async () => {
      const model = uniqueConfigName('model');
      expectStatus(await call('PUT', `/api/v1/prices/${model}`, price(1)), 200);
      return { url: `/api/v1/prices/${model}`, editUrl: `/api/v1/prices/${model}`, key: model };
    },
    lockSql: 'select 1 from prices where model = $1 for update',
    method: 'PUT',
    edits: [price(2), price(3), price(4)],
    state: (b) => b.inputMicrosPerToken,
  },
  {
    kind: 'a tool server (PUT /tool-servers/:name)',
    create: async () => {
      const name = uniqueConfigName('tools');
      expectStatus(await call('PUT', `/api/v1/tool-servers/${name}`, tool(1000)), 201);
      return { url: `/api/v1/tool-servers/${name}`, editUrl: `/api/v1/tool-servers/${name}`, key: name };
    },
    lockSql: 'select 1 from tool_servers where name = $1 and deleted_at is null for update',
    method: 'PUT',
    edits: [tool(2000), tool(3000), tool(4000)],
    state: (b) => b.timeoutMs,
  },
];

async function read(url: string): Promise<{ etag: string; body: Record<string, unknown> }> {
  const res = await send('GET', url);
  const body = expectStatus<Record<string, unknown>>(res, 200);
  return { etag: etagOf(res), body };
}

for (const k of KINDS) {
  t.test(`${k.kind}: an edit with the current ETag succeeds with a new one, a stale one is refused 412 and writes nothing`, async (t) => {
    const { url, editUrl } = await k.create();
    const first = await read(url);
    t.match(first.etag, ETAG, 'the GET carries a strong ETag, a quoted string');

    const edited = await send(k.method, editUrl, k.edits[0], first.etag);
    t.equal(edited.statusCode, 200, edited.body);
    const editedEtag = etagOf(edited);
    t.not(editedEtag, first.etag, 'the edit changed the stored state, so its ETag');
    const afterEdit = await read(url);
    t.equal(afterEdit.etag, editedEtag, "the GET's ETag is the edit reply's");

    const versionBefore = await version();
    const stale = await send(k.method, editUrl, k.edits[1], first.etag);
    t.equal(stale.statusCode, 412, stale.body);
    t.equal(stale.json<ErrorReply>().error.code, 'ZN_ERR_CP_PRECONDITION_FAILED');
    t.match(stale.json<ErrorReply>().error.message, /changed since it was read.*re-read it/i);
    t.notOk(stale.headers.etag, 'a refusal carries no ETag');
    const afterStale = await read(url);
    t.same(k.state(afterStale.body), k.state(afterEdit.body), 'nothing changed');
    t.equal(afterStale.etag, editedEtag);
    t.equal(await version(), versionBefore, 'no config version recorded');

    const weakStale = await send(k.method, editUrl, k.edits[1], 'W/"not-it"');
    t.equal(weakStale.statusCode, 412, 'a weak tag of another ETag does not match');
    // A compressing reverse proxy (nginx's gzip) passes the ETag on as W/"…", and a client sends back what it got.
    const weak = await send(k.method, editUrl, k.edits[1], `W/${editedEtag}`);
    t.equal(weak.statusCode, 200, `a weak tag counts as its strong one: ${weak.body}`);
    const weakEtag = etagOf(weak);

    const listed = await send(k.method, editUrl, k.edits[1], `"not-it", ${weakEtag}`);
    t.equal(listed.statusCode, 200, `a list naming the current ETag matches: ${listed.body}`);
    t.equal((await read(url)).etag, etagOf(listed));
  });

  t.test(`${k.kind}: two edits racing with the same If-Match end in exactly one 200 and one 412`, async (t) => {
    const { url, editUrl, key } = await k.create();
    const { etag } = await read(url);
    // Both edits queue behind this lock, so both are past anything checked before their transaction.
    const blocker = new pg.Client({ connectionString: db.url });
    await blocker.connect();
    t.teardown(() => blocker.end());
    await blocker.query('begin');
    t.equal((await blocker.query(k.lockSql, [key])).rowCount, 1, 'the row is locked');
    const racing = [send(k.method, editUrl, k.edits[1], etag), send(k.method, editUrl, k.edits[2], etag)];
    await waitFor(async () => {
      // Not on the blocker: its transaction would see one snapshot of pg_stat_activity throughout.
      const { rows } = await probe.query<{ n: number }>(
        "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'",
      );
      return rows[0]!.n >= 2;
    }, { what: 'both edits waiting on the row lock' });
    await blocker.query('commit');
    const replies = await Promise.all(racing);
    t.same(replies.map((r) => r.statusCode).sort(), [200, 412], replies.map((r) => r.body).join('\n'));
    const winner = replies.findIndex((r) => r.statusCode === 200);
    const loser = replies[1 - winner]!;
    t.equal(loser.json<Partial<ErrorReply>>().error?.code, 'ZN_ERR_CP_PRECONDITION_FAILED');
    const after = await read(url);
    t.equal(after.etag, etagOf(replies[winner]!), "the GET's ETag is the winner's");
    const winnerAlone = await k.create();
    expectStatus(await send(k.method, winnerAlone.editUrl, k.edits[winner + 1]), 200);
    t.same(k.state(after.body), k.state((await read(winnerAlone.url)).body), "the winner's edit stands");
  });

  t.test(`${k.kind}: without If-Match, with "*", or with a malformed one`, async (t) => {
    const { url, editUrl } = await k.create();
    const first = await read(url);
    const plain = await send(k.method, editUrl, k.edits[0]);
    t.equal(plain.statusCode, 200, `no If-Match: as before, ${plain.body}`);
    t.equal((await read(url)).etag, etagOf(plain));
    const any = await send(k.method, editUrl, k.edits[1], '*');
    t.equal(any.statusCode, 200, `"*" matches the existing object: ${any.body}`);
    const changed = await read(url);
    t.not(changed.etag, first.etag);

    for (const malformed of [`"${'a'.repeat(MAX_IF_MATCH_LENGTH)}"`, 'not-quoted', '*, "x"']) {
      const res = await send(k.method, editUrl, k.edits[2], malformed);
      t.equal(res.statusCode, 400, `${malformed.slice(0, 20)}: ${res.body}`);
      t.equal(res.json<ErrorReply>().error.code, 'ZN_ERR_CP_INVALID_REQUEST');
      t.match(res.json<ErrorReply>().error.message, /^If-Match: must be/);
    }
    t.equal((await read(url)).etag, changed.etag, 'nothing written by the malformed ones');
  });
}

t.test('an upstream given a new key gets a new ETag though its view shows the same hasApiKey', async (t) => {
  const name = uniqueConfigName('up');
  expectStatus(await call('POST', '/api/v1/upstreams', { name, kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1', apiKey: 'sk-first-key-000000' }), 201);
  const before = await read(`/api/v1/upstreams/${name}`);
  const rotated = await send('PATCH', `/api/v1/upstreams/${name}`, { apiKey: 'sk-second-key-00000' }, before.etag);
  t.equal(rotated.statusCode, 200, rotated.body);
  const after = await read(`/api/v1/upstreams/${name}`);
  t.same(after.body, before.body, 'the view is the same');
  t.not(after.etag, before.etag, 'the stored state is not');
  const stale = await send('PATCH', `/api/v1/upstreams/${name}`, { apiKey: null }, before.etag);
  t.equal(stale.statusCode, 412, 'removing "the key I saw" is refused once another replaced it');
});

t.test('a PUT that would create a price or a tool server with If-Match is refused 412 and creates nothing', async (t) => {
  for (const ifMatch of ['*', '"abc"']) {
    const model = uniqueConfigName('model');
    const res = await send('PUT', `/api/v1/prices/${model}`, price(1), ifMatch);
    t.equal(res.statusCode, 412, res.body);
    t.equal(res.json<ErrorReply>().error.code, 'ZN_ERR_CP_PRECONDITION_FAILED');
    t.equal((await send('GET', `/api/v1/prices/${model}`)).statusCode, 404, 'no price created');

    const name = uniqueConfigName('tools');
    const tres = await send('PUT', `/api/v1/tool-servers/${name}`, tool(1000), ifMatch);
    t.equal(tres.statusCode, 412, tres.body);
    t.equal((await send('GET', `/api/v1/tool-servers/${name}`)).statusCode, 404, 'no tool server created');
  }
  const created = await send('PUT', `/api/v1/tool-servers/${uniqueConfigName('tools')}`, tool(1000));
  t.equal(created.statusCode, 201, 'without If-Match the PUT creates, as before');
  t.match(etagOf(created), ETAG, 'with an ETag');
});

t.test('an edit of an object that does not exist stays a 404 with or without If-Match', async (t) => {
  const res = await send('PATCH', '/api/v1/upstreams/nope-not-here', { timeoutMs: 1000 }, '"abc"');
  t.equal(res.statusCode, 404);
  t.equal(res.json<ErrorReply>().error.code, 'ZN_ERR_CP_UPSTREAM_NOT_FOUND');
});
