// A JSON body whose bytes are not UTF-8 is refused (400 ZN_ERR_INVALID_JSON) on every route that
// reads a body, not read with U+FFFD in place of the bad bytes and forwarded, recorded and charged
// as a request the caller never sent. Valid UTF-8 (a literal U+FFFD, a byte order mark) is served
// and forwarded as written.
import t from 'tap';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { rawSocket } from '../fixtures/raw-socket.js';
import { waitFor } from '../fixtures/wait-for.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';

t.test('a body with bytes that are not UTF-8 is refused before anything is forwarded', async (t) => {
  const openAi = await startFakeUpstream(t);
  const anthropic = await startFakeAnthropicUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: openAi.url,
    bundle: (base) => ({
      upstreams: [...base.upstreams, { id: 'up-claude', name: 'claude', kind: 'anthropic', baseUrl: anthropic.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 30_000 }],
      routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 }],
    }),
  });
  const forwarded = () => openAi.requests.length + anthropic.requests.length;

  /** Sends `body` as written, byte for byte, with a correct Content-Length; the status and parsed answer. */
  const send = async (path: string, body: Buffer, headers: Record<string, string>) => {
    const { socket, answer, closed } = rawSocket(t, node.origin);
    const head = [
      `POST ${path} HTTP/1.1`,
      'Host: 127.0.0.1',
      `Content-Length: ${body.length}`,
      'Connection: close',
      ...Object.entries({ 'Content-Type': 'application/json', ...headers }).map(([name, value]) => `${name}: ${value}`),
    ].join('\r\n');
    socket.write(Buffer.concat([Buffer.from(`${head}\r\n\r\n`), body]));
    await waitFor(() => closed(), { what: `the node to answer ${path} and close` });
    const text = answer();
    const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
    return { status, json: JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)) as Record<string, unknown> };
  };
  /** `"h<0xFF><0xC3>i"` in place of `"PLACE"`: 0xFF is never UTF-8, 0xC3 starts a sequence `i` does not continue. */
  const withBadBytes = (json: string) => {
    const [before, after] = json.split('PLACE') as [string, string];
    return Buffer.concat([Buffer.from(`${before}h`), Buffer.from([0xff, 0xc3]), Buffer.from(`i${after}`)]);
  };
  const bearer = { Authorization: `Bearer ${node.secret}` };

  t.test('chat completions: 400 ZN_ERR_INVALID_JSON naming UTF-8, param null; nothing forwarded, no pipeline run', async (t) => {
    const before = forwarded();
    const finishedBefore = node.finished.length;
    const res = await send('/v1/chat/completions', withBadBytes('{"model":"echo","messages":[{"role":"user","content":"PLACE"}]}'), bearer);
    t.equal(res.status, 400);
    t.same(res.json, { error: { message: 'The request body is not valid JSON: it is not valid UTF-8.', type: 'invalid_request_error', param: null, code: 'ZN_ERR_INVALID_JSON' } });
    t.equal(forwarded(), before, 'the upstream never received the request');
    t.equal(node.finished.length, finishedBefore, 'no pipeline run: nothing recorded or charged');
  });

  t.test('embeddings, /v1/messages (Anthropic shape) and /mcp/{server} read bodies with the same parser', async (t) => {
    const before = forwarded();
    const finishedBefore = node.finished.length;
    const embeddings = await send('/v1/embeddings', withBadBytes('{"model":"echo","input":"PLACE"}'), bearer);
    t.match(embeddings, { status: 400, json: { error: { code: 'ZN_ERR_INVALID_JSON', param: null, message: /not valid UTF-8/ } } });
    const messages = await send(
      '/v1/messages',
      withBadBytes('{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"PLACE"}]}'),
      { 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
    );
    t.match(messages, { status: 400, json: { type: 'error', error: { type: 'invalid_request_error', message: /not valid UTF-8/ } } });
    const mcp = await send('/mcp/tools', withBadBytes('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"PLACE"}}'), bearer);
    t.match(mcp, { status: 400, json: { error: { code: 'ZN_ERR_INVALID_JSON', message: /not valid UTF-8/ } } });
    t.equal(forwarded(), before, 'nothing was forwarded');
    t.equal(node.finished.length, finishedBefore, 'no pipeline run');
  });

  t.test('valid UTF-8 is served and forwarded as written: a literal U+FFFD, multi-byte text, a byte order mark', async (t) => {
    const content = 'h\uFFFDi – héllo 日本 😀';
    const before = openAi.requests.length;
    const res = await send('/v1/chat/completions', Buffer.from(`\uFEFF{"model":"echo","messages":[{"role":"user","content":${JSON.stringify(content)}}]}`), bearer);
    t.equal(res.status, 200);
    t.equal(openAi.requests.length, before + 1);
    t.match(openAi.requests.at(-1)?.body, { messages: [{ role: 'user', content }] }, 'the upstream got the text the caller sent');
  });

  t.test('the other body checks still come first or still hold', async (t) => {
    // A declared charset other than UTF-8 is named as such, whatever its bytes.
    const latin1 = await send('/v1/chat/completions', withBadBytes('{"model":"echo","messages":[{"role":"user","content":"PLACE"}]}'), { ...bearer, 'Content-Type': 'application/json; charset=iso-8859-1' });
    t.match(latin1, { status: 415, json: { error: { code: 'ZN_ERR_UNSUPPORTED_CHARSET' } } });
    const proto = await send('/v1/chat/completions', Buffer.from('{"model":"echo","messages":[{"role":"user","content":"hi"}],"__proto__":{"x":1}}'), bearer);
    t.match(proto, { status: 400, json: { error: { code: 'ZN_ERR_INVALID_REQUEST', message: /"__proto__"/ } } });
    const broken = await send('/v1/chat/completions', Buffer.from('{"model":'), bearer);
    t.match(broken, { status: 400, json: { error: { code: 'ZN_ERR_INVALID_JSON', message: 'The request body is not valid JSON.' } } });
  });
});
