// Fastify's own refusals before routing (a URL it cannot decode, a path parameter over its length
// limit) quote the request's path, bounded, and never its query string: fastify's messages quote
// the raw URL whole, and callers put API keys in query strings (`?api-key=…`).
import t from 'tap';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';

t.test('framework errors and the request URL', async (t) => {
  const upstream = await startFakeUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const post = (path: string): Promise<Response> => fetch(node.origin + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  const refusal = async (res: Response): Promise<{ text: string; code: unknown; message: string }> => {
    const text = await res.text();
    const body = JSON.parse(text) as { error: { code: unknown; message: string } };
    return { text, code: body.error.code, message: body.error.message };
  };

  t.test('an undecodable URL is refused quoting its path without the query string that carries a key', async (t) => {
    const res = await post(`/v1/chat%zz/completions?api-key=${node.secret}`);
    t.equal(res.status, 400);
    const { text, code, message } = await refusal(res);
    t.equal(code, 'ZN_ERR_INVALID_REQUEST');
    t.notOk(text.includes(node.secret), 'the key in the query string is not echoed');
    t.notOk(text.includes('api-key'), 'nor any of the query string');
    t.equal(message, 'Invalid request: the URL path "/v1/chat%zz/completions" cannot be decoded (every % must start a %XX escape of UTF-8).');
  });

  t.test('an undecodable URL of any length is answered quoting at most 200 characters of its path', async (t) => {
    const res = await fetch(`${node.origin}/v1/models/${'a'.repeat(8000)}%zz?k=${'q'.repeat(4000)}`, { headers: { authorization: `Bearer ${node.secret}` } });
    t.equal(res.status, 400);
    const { text, code, message } = await refusal(res);
    t.equal(code, 'ZN_ERR_INVALID_REQUEST');
    t.ok(text.length < 1000, `the answer is ${text.length} bytes`);
    t.ok(message.includes(`"/v1/models/${'a'.repeat(200 - '/v1/models/'.length)}…"`), 'the message quotes the path\'s first 200 characters');
  });

  t.test('a path parameter over fastify\'s length limit is refused quoting its path without the query string', async (t) => {
    const res = await post(`/mcp/${'s'.repeat(5000)}?api-key=${node.secret}`);
    t.equal(res.status, 400);
    const { text, code, message } = await refusal(res);
    t.equal(code, 'ZN_ERR_INVALID_REQUEST');
    t.notOk(text.includes(node.secret), 'the key in the query string is not echoed');
    t.ok(text.length < 1000, `the answer is ${text.length} bytes`);
    t.match(message, /^Invalid request: a segment of the URL path "\/mcp\/s{195}…" is longer than the node accepts/);
  });
});
