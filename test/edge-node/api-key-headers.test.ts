// How the caller's key is read from `Authorization` and `x-api-key`: two different keys are refused
// as a conflict (neither silently wins), an Authorization header that is not `Bearer <key>` is
// reported as malformed (not as "no key"), and the forms callers really send keep working.
import { connect } from 'node:net';
import t from 'tap';
import { presentedApiKey } from '../../edge-node/src/auth/api-key-verifier.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { newCallerKey } from './config-fixtures.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';

/** Header lines as Node's rawHeaders holds them (name, value, …), one line per entry. */
const lines = (headers: Record<string, string>): string[] => Object.entries(headers).flat();

t.test('the presented key, or why there is none', async (t) => {
  t.same(presentedApiKey(lines({ authorization: 'Bearer k1' })), { ok: true, key: 'k1' });
  t.same(presentedApiKey(lines({ authorization: 'bearer \tk1 ' })), { ok: true, key: 'k1' });
  t.same(presentedApiKey(lines({ 'x-api-key': ' k1\t' })), { ok: true, key: 'k1' });
  t.same(presentedApiKey(lines({ authorization: 'Bearer k1', 'x-api-key': 'k1' })), { ok: true, key: 'k1' }, 'the same key twice is fine');
  t.same(presentedApiKey(lines({ authorization: 'Bearer ', 'x-api-key': 'k1' })), { ok: true, key: 'k1' }, 'an empty Bearer counts as absent');
  t.same(presentedApiKey(lines({ authorization: '', 'x-api-key': 'k1' })), { ok: true, key: 'k1' });
  t.same(presentedApiKey(lines({ authorization: 'Bearer k1', 'x-api-key': 'k2' })), { ok: false, code: 'ZN_ERR_API_KEY_CONFLICT' });
  for (const authorization of ['Basic k1', 'Bearer k1 k2', 'Bearerk1', 'k1']) {
    t.same(presentedApiKey(lines({ authorization })), { ok: false, code: 'ZN_ERR_API_KEY_MALFORMED' }, authorization);
  }
  // A malformed Bearer is the caller's mistake whatever else is sent.
  t.same(presentedApiKey(lines({ authorization: 'Bearer k1 k2', 'x-api-key': 'k1' })), { ok: false, code: 'ZN_ERR_API_KEY_MALFORMED' });
  // Another scheme beside x-api-key is someone else's credential (an auth proxy's Basic): ignored.
  for (const authorization of ['Basic dXNlcjpwYXNz', 'Bearerk1', 'k9']) {
    t.same(presentedApiKey(lines({ authorization, 'x-api-key': 'k1' })), { ok: true, key: 'k1' }, `${authorization} beside x-api-key`);
  }
  t.same(presentedApiKey(lines({})), { ok: false, code: 'ZN_ERR_API_KEY_MISSING' });
  t.same(presentedApiKey(lines({ authorization: 'Bearer' })), { ok: false, code: 'ZN_ERR_API_KEY_MISSING' });
});

t.test('every header line counts: a key sent twice is one key, two different keys in repeated lines are a conflict', async (t) => {
  const conflict = { ok: false, code: 'ZN_ERR_API_KEY_CONFLICT' };
  t.same(presentedApiKey(['Authorization', 'Bearer k1', 'Authorization', 'Bearer k2']), conflict, 'the first Authorization does not win');
  t.same(presentedApiKey(['Authorization', 'Bearer k2', 'Authorization', 'Bearer k1']), conflict, 'nor the last');
  t.same(presentedApiKey(['x-api-key', 'k1', 'X-Api-Key', 'k2']), conflict);
  t.same(presentedApiKey(['authorization', 'Bearer k1', 'x-api-key', 'k1', 'X-API-KEY', 'k2']), conflict, 'across both headers');
  t.same(presentedApiKey(['x-api-key', 'k1', 'x-api-key', 'k1']), { ok: true, key: 'k1' }, 'the same key twice in x-api-key');
  t.same(presentedApiKey(['Authorization', 'Bearer k1', 'AUTHORIZATION', 'bearer  k1']), { ok: true, key: 'k1' }, 'the same key twice in Authorization');
  t.same(presentedApiKey(['Authorization', 'Basic dXNlcjpwYXNz', 'Authorization', 'Bearer k1']), { ok: true, key: 'k1' }, "a proxy's Basic line beside the key is ignored");
  t.same(presentedApiKey(['Authorization', 'Bearer k1', 'Authorization', 'Bearer k1 k2']), { ok: false, code: 'ZN_ERR_API_KEY_MALFORMED' });
  t.same(presentedApiKey(['Authorization', 'Bearer', 'x-api-key', '', 'Authorization', 'Bearer k1']), { ok: true, key: 'k1' }, 'empty lines count as absent');
});

/** One request written as raw header lines over a socket (HTTP clients merge repeated headers); its status and error code. */
function rawCall(origin: string, headerLines: string[]): Promise<{ status: number; code: string | null }> {
  const { hostname, port } = new URL(origin);
  const body = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] });
  const request = ['POST /v1/chat/completions HTTP/1.1', `Host: ${hostname}:${port}`, 'Content-Type: application/json', `Content-Length: ${Buffer.byteLength(body)}`, 'Connection: close', ...headerLines, '', body].join('\r\n');
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(request));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const answer = JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)) as { error?: { code?: string } };
      resolve({ status: Number(text.split(' ')[1]), code: answer.error?.code ?? null });
    });
  });
}

t.test('over a socket: repeated key headers carrying two keys are refused as a conflict whatever their order, the same key repeated is served', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const other = newCallerKey().secret;
  const conflict = { status: 401, code: 'ZN_ERR_API_KEY_CONFLICT' };
  t.same(await rawCall(node.origin, [`Authorization: Bearer ${node.secret}`, `Authorization: Bearer ${other}`]), conflict, 'valid key first');
  t.same(await rawCall(node.origin, [`Authorization: Bearer ${other}`, `Authorization: Bearer ${node.secret}`]), conflict, 'valid key last');
  t.same(await rawCall(node.origin, [`x-api-key: ${node.secret}`, `x-api-key: ${other}`]), conflict);
  t.same(await rawCall(node.origin, [`Authorization: Bearer ${node.secret}`, `x-api-key: ${other}`]), conflict);
  t.same(await rawCall(node.origin, [`x-api-key: ${node.secret}`, `x-api-key: ${node.secret}`]), { status: 200, code: null }, 'the same key twice in x-api-key');
  t.same(await rawCall(node.origin, [`Authorization: Bearer ${node.secret}`, `authorization: Bearer ${node.secret}`]), { status: 200, code: null }, 'the same key twice in Authorization');
  t.notOk(node.logText().includes(other) || node.logText().includes(node.secret), 'no key is logged');
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
    message: /Authorization and x-api-key headers .*carry different keys/,
  });
  t.match(await call({ authorization: `Basic ${node.secret}` }), { status: 401, code: 'ZN_ERR_API_KEY_MALFORMED', message: /Authorization header is malformed/ });
  t.match(await call({ authorization: 'Bearer a b' }), { status: 401, code: 'ZN_ERR_API_KEY_MALFORMED' });
  t.match(await call({}), { status: 401, code: 'ZN_ERR_API_KEY_MISSING' });
  t.match(await call({ 'x-api-key': node.secret, authorization: `Bearer ${node.secret}` }), { status: 200 }, 'the same key in both headers is served');
  t.match(await call({ 'x-api-key': node.secret, authorization: 'Bearer ' }), { status: 200 }, 'an empty Bearer beside x-api-key is served');
  t.match(await call({ 'x-api-key': node.secret, authorization: 'Basic dXNlcjpwYXNz' }), { status: 200 }, "an auth proxy's Basic credentials beside x-api-key are ignored");
  t.notOk(node.logText().includes(other.secret) || node.logText().includes(node.secret), 'no key is logged');
});
