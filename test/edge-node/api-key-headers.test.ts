// How the caller's key is read from `Authorization` and `x-api-key`: two different keys are refused
// as a conflict (neither silently wins), an Authorization header that is not `Bearer <key>` is
// reported as malformed (not as "no key"), and the forms callers really send keep working.
import t from 'tap';
import { presentedApiKey } from '../../edge-node/src/auth/api-key-verifier.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { newCallerKey } from './config-fixtures.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';

t.test('the presented key, or why there is none', async (t) => {
  t.same(presentedApiKey({ authorization: 'Bearer k1' }), { ok: true, key: 'k1' });
  t.same(presentedApiKey({ authorization: 'bearer \tk1 ' }), { ok: true, key: 'k1' });
  t.same(presentedApiKey({ 'x-api-key': ' k1\t' }), { ok: true, key: 'k1' });
  t.same(presentedApiKey({ authorization: 'Bearer k1', 'x-api-key': 'k1' }), { ok: true, key: 'k1' }, 'the same key twice is fine');
  t.same(presentedApiKey({ authorization: 'Bearer ', 'x-api-key': 'k1' }), { ok: true, key: 'k1' }, 'an empty Bearer counts as absent');
  t.same(presentedApiKey({ authorization: '', 'x-api-key': 'k1' }), { ok: true, key: 'k1' });
  t.same(presentedApiKey({ authorization: 'Bearer k1', 'x-api-key': 'k2' }), { ok: false, code: 'ZN_ERR_API_KEY_CONFLICT' });
  for (const authorization of ['Basic k1', 'Bearer k1 k2', 'Bearerk1', 'k1']) {
    t.same(presentedApiKey({ authorization }), { ok: false, code: 'ZN_ERR_API_KEY_MALFORMED' }, authorization);
  }
  // A malformed Bearer is the caller's mistake whatever else is sent.
  t.same(presentedApiKey({ authorization: 'Bearer k1 k2', 'x-api-key': 'k1' }), { ok: false, code: 'ZN_ERR_API_KEY_MALFORMED' });
  // Another scheme beside x-api-key is someone else's credential (an auth proxy's Basic): ignored.
  for (const authorization of ['Basic dXNlcjpwYXNz', 'Bearerk1', 'k9']) {
    t.same(presentedApiKey({ authorization, 'x-api-key': 'k1' }), { ok: true, key: 'k1' }, `${authorization} beside x-api-key`);
  }
  t.same(presentedApiKey({}), { ok: false, code: 'ZN_ERR_API_KEY_MISSING' });
  t.same(presentedApiKey({ authorization: 'Bearer' }), { ok: false, code: 'ZN_ERR_API_KEY_MISSING' });
});

t.test('over HTTP: conflicting and malformed key headers get their own 401 codes and messages', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const other = newCallerKey();
  const call = async (headers: Record<string, string>) => {
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }),
    });
    const json = (await res.json()) as { error?: { code: string; message: string; type: string } };
    return { status: res.status, ...json.error };
  };

  t.match(await call({ 'x-api-key': node.secret, authorization: `Bearer ${other.secret}` }), {
    status: 401,
    type: 'authentication_error',
    code: 'ZN_ERR_API_KEY_CONFLICT',
    message: /Authorization and x-api-key headers carry different keys/,
  });
  t.match(await call({ authorization: `Basic ${node.secret}` }), { status: 401, code: 'ZN_ERR_API_KEY_MALFORMED', message: /Authorization header is malformed/ });
  t.match(await call({ authorization: 'Bearer a b' }), { status: 401, code: 'ZN_ERR_API_KEY_MALFORMED' });
  t.match(await call({}), { status: 401, code: 'ZN_ERR_API_KEY_MISSING' });
  t.match(await call({ 'x-api-key': node.secret, authorization: `Bearer ${node.secret}` }), { status: 200 }, 'the same key in both headers is served');
  t.match(await call({ 'x-api-key': node.secret, authorization: 'Bearer ' }), { status: 200 }, 'an empty Bearer beside x-api-key is served');
  t.match(await call({ 'x-api-key': node.secret, authorization: 'Basic dXNlcjpwYXNz' }), { status: 200 }, "an auth proxy's Basic credentials beside x-api-key are ignored");
  t.notOk(node.logText().includes(other.secret) || node.logText().includes(node.secret), 'no key is logged');
});
