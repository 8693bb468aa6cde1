/**
 * The console login (`POST /api/console/login`) and enrollment (`POST /api/enroll`) check their
 * bodies with route schemas, not the admin API's handlers: a value of another JSON type, a missing
 * field and an unknown field are refused in the admin API's words (`must be a string`, `is
 * required`, `unknown field`; http/zod-schemas.ts's `adminErrorMap`), never zod's own ("Invalid
 * input: expected string, received number", "Unrecognized key"). Real PostgreSQL.
 */
import t from 'tap';
import { testDatabase } from '../fixtures/postgres.js';
import { FACTS, nodesApp } from './nodes-harness.js';

interface ErrorBody { error: { code: string; param: string | null; message: string } }

const db = await testDatabase(t);
const { app } = await nodesApp(t, db.url, { nodes: { enrollAttemptsPerMinute: 1_000 } });
let ip = 0;

async function refusal(url: string, payload: unknown): Promise<ErrorBody['error']> {
  const res = await app.inject({
    method: 'POST', url, payload: JSON.stringify(payload), headers: { 'content-type': 'application/json' }, remoteAddress: `10.9.0.${++ip}`,
  });
  if (res.statusCode !== 400) throw new Error(`${url} ${JSON.stringify(payload)}: expected 400, got ${res.statusCode} ${res.body}`);
  return res.json<ErrorBody>().error;
}

t.test('the console login names a wrong type, a missing token and an unknown field as the admin API does', async (t) => {
  const cases: Array<[unknown, string]> = [
    [{ adminToken: 123 }, "body field 'adminToken': must be a string"],
    [{ adminToken: null }, "body field 'adminToken': must be a string"],
    [{ adminToken: ['x'] }, "body field 'adminToken': must be a string"],
    [{}, "body field 'adminToken': is required"],
    [{ adminToken: 'not-the-token', bogus: 1 }, "body field 'bogus': unknown field"],
    [[], 'body: must be a JSON object'],
    ['token', 'body: must be a JSON object'],
  ];
  for (const [payload, message] of cases) {
    const error = await refusal('/api/console/login', payload);
    t.equal(error.code, 'ZN_ERR_CP_INVALID_REQUEST', JSON.stringify(payload));
    t.equal(error.message, message, JSON.stringify(payload));
    t.notMatch(error.message, /Invalid input|Unrecognized|received/, 'none of zod\'s own words');
  }
  t.equal((await refusal('/api/console/login', { adminToken: 1, bogus: 1 })).param, 'adminToken', 'the first field is the param');
});

t.test('enrollment names an unknown field, nested or not, and a wrong type as the admin API does; its stated rules stay', async (t) => {
  const body = { token: 'zn_it_nothing', mode: 'install', facts: FACTS };
  const cases: Array<[unknown, string | RegExp]> = [
    [{ ...body, bogus: 1 }, "body field 'bogus': unknown field"],
    [{ ...body, bogus: 1, other: 2 }, "body field 'bogus': unknown field; body field 'other': unknown field"],
    [{ ...body, facts: { ...FACTS, bogus: true } }, "body field 'facts.bogus': unknown field"],
    [[body], 'body: must be a JSON object'],
    // A rule the schema states itself is kept.
    [{ ...body, mode: 'upgrade' }, "body field 'mode': must be one of install, reenroll"],
    [{ ...body, token: 5 }, /^body field 'token': must be the token of a one-time command/],
  ];
  for (const [payload, message] of cases) {
    const error = await refusal('/api/enroll', payload);
    t.equal(error.code, 'ZN_ERR_CP_INVALID_REQUEST', JSON.stringify(payload));
    if (typeof message === 'string') t.equal(error.message, message, JSON.stringify(payload));
    else t.match(error.message, message, JSON.stringify(payload));
    t.notMatch(error.message, /Invalid input|Unrecognized|received/, 'none of zod\'s own words');
  }
});
