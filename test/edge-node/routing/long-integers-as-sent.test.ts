// Fields the node does not read go to the upstream as sent, integers past 2^53 included: JSON.parse
// rounds them (an int64 `seed`, a 64-bit id in `metadata`), so the node puts the caller's digits
// back into what it sends, on chat completions, embeddings and Anthropic's messages alike.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { anthropicMessageJson, chatCompletionJson, embeddingsJson } from '../../fixtures/canned-answers.js';
import { startPipelineNode, withClaudeRoute } from '../pipeline/pipeline-harness.js';

/** An upstream that keeps each request body's text as it arrived and answers each API with a canned answer. */
async function textRecordingUpstream(t: { teardown(fn: () => unknown): void }): Promise<{ url: string; bodies: string[] }> {
  const bodies: string[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      bodies.push(Buffer.concat(chunks).toString('utf8'));
      const answer = req.url!.endsWith('/embeddings') ? embeddingsJson() : req.url!.endsWith('/messages') ? anthropicMessageJson('ok') : chatCompletionJson('ok');
      res.writeHead(200, { 'content-type': 'application/json' }).end(answer);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, bodies };
}

t.test('integers past 2^53 reach the upstream digit for digit; strings that look like them and safe integers are untouched', async (t) => {
  const upstream = await textRecordingUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, bundle: (base) => withClaudeRoute(base, upstream.url) });
  const post = async (path: string, body: string): Promise<string> => {
    const res = await fetch(node.origin + path, { method: 'POST', headers: { authorization: `Bearer ${node.secret}`, 'content-type': 'application/json' }, body });
    t.equal(res.status, 200, `${path}: ${res.status} ${res.status === 200 ? '' : await res.clone().text()}`);
    await res.arrayBuffer();
    return upstream.bodies.at(-1)!;
  };

  const chat = await post('/v1/chat/completions',
    '{"model":"echo","messages":[{"role":"user","content":"id 12345678901234567890"}],"seed":9007199254740993,"metadata":{"big":12345678901234567890,"neg":-9223372036854775807,"safe":9007199254740991}}');
  t.match(chat, /"seed":9007199254740993[,}]/, 'seed');
  t.match(chat, /"big":12345678901234567890[,}]/, 'a 20-digit integer');
  t.match(chat, /"neg":-9223372036854775807[,}]/, 'a negative int64');
  t.match(chat, /"safe":9007199254740991[,}]/);
  t.match(chat, /"content":"id 12345678901234567890"/, 'a string of digits stays a string');

  const embeddings = await post('/v1/embeddings', '{"model":"echo","input":"hi","user_id":18446744073709551615}');
  t.match(embeddings, /"user_id":18446744073709551615[,}]/);

  const messages = await post('/v1/messages', '{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"u"},"vendor_trace":{"span":9007199254740995}}');
  t.match(messages, /"span":9007199254740995[,}]/);
});

t.test('two integers that round to one double are left as JSON.parse read them: which was where cannot be told', async (t) => {
  const upstream = await textRecordingUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url });
  const res = await fetch(node.origin + '/v1/chat/completions', {
    method: 'POST',
    headers: { authorization: `Bearer ${node.secret}`, 'content-type': 'application/json' },
    body: '{"model":"echo","messages":[{"role":"user","content":"hi"}],"metadata":{"a":9007199254740993,"b":9007199254740992}}',
  });
  t.equal(res.status, 200);
  await res.arrayBuffer();
  t.match(upstream.bodies.at(-1), /"a":9007199254740992,"b":9007199254740992/);
});
