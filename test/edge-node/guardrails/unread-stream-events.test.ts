// Stream events output guardrails cannot read, through a listening node and a raw upstream: a
// close-delimited body cut inside its last event never delivers that half event (the stream ends
// with the node's error), and a whole event whose data is not a JSON object ends a stream under output
// rules with ZN_ERR_GUARDRAIL_BLOCKED instead of passing unchecked; without rules it passes as it came.
import type net from 'node:net';
import t from 'tap';
import { SSE_HEAD_CLOSE, chatChunk, startRawUpstream } from '../../fixtures/raw-upstream.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { bundleKey, newCallerKey } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';
import { policy } from './guardrail-fixtures.js';

const EMAIL = 'alice.secret@example.com';
const ev = (type: string, data: Record<string, unknown> = {}): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
const ANTHROPIC_OPENING =
  ev('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [], usage: { input_tokens: 5, output_tokens: 1 } } }) +
  ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
  ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hello. ' } });

interface Setup {
  node: PipelineNode;
  /** The secret of key-plain (no policy); key-a's (e-mails masked in output) is node.secret. */
  plainSecret: string;
  /** What the raw upstream writes after its 200 head, then it closes the connection. */
  body: string;
}

/** A node whose `echo` (OpenAI-compatible) and `claude` (Anthropic) both go to one raw upstream answering `setup.body`. */
async function startSetup(t: { teardown(fn: () => unknown): void }): Promise<Setup> {
  const setup = { body: '' } as Setup;
  const raw = await startRawUpstream(t, (socket: net.Socket) => void socket.end(SSE_HEAD_CLOSE + setup.body));
  const plain = newCallerKey();
  setup.plainSecret = plain.secret;
  setup.node = await startPipelineNode(t, {
    upstreamUrl: raw.url,
    bundle: (base, hash) => ({
      apiKeys: [bundleKey('key-a', hash, { guardrailPolicyId: 'p' }), bundleKey('key-plain', plain.sha256)],
      guardrailPolicies: [policy('p', [{ detector: 'email', action: 'mask', on: 'output' }])],
      upstreams: [...base.upstreams, { id: 'up-claude', name: 'claude', kind: 'anthropic', baseUrl: raw.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 30_000 }],
      routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 }],
    }),
  });
  return setup;
}

async function chatStream(node: PipelineNode, secret: string) {
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
    body: JSON.stringify({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  });
  return { status: res.status, text: await res.text(), requestId: res.headers.get('x-request-id') };
}

async function messagesStream(node: PipelineNode, secret: string) {
  const res = await fetch(`${node.origin}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': secret },
    body: JSON.stringify({ model: 'claude', stream: true, max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }),
  });
  return { status: res.status, text: await res.text(), requestId: res.headers.get('x-request-id') };
}

function finishedRequest(node: PipelineNode, requestId: string | null) {
  return waitFor(() => node.finished.find((f) => f.requestId === requestId), { what: `the finished request ${String(requestId)}` });
}

/** `event` cut right after `marker` (a body that ends inside its last event). */
const cutAfter = (event: string, marker: string): string => event.slice(0, event.indexOf(marker) + marker.length);

t.test('a chat stream cut inside its last event ends with the node’s error, and nothing of that half event reaches the caller', async (t) => {
  const setup = await startSetup(t);
  setup.body = chatChunk('Hello. ') + cutAfter(chatChunk(`contact ${EMAIL} now`), `${EMAIL} n`);
  for (const secret of [setup.node.secret, setup.plainSecret]) {
    const { status, text, requestId } = await chatStream(setup.node, secret);
    t.equal(status, 200);
    // Under the mask rule "Hello. " is still held back (the e-mail window) when the stream ends.
    if (secret === setup.plainSecret) t.match(text, /"content":"Hello\. "/);
    t.notMatch(text, EMAIL, 'the e-mail is not delivered');
    t.notMatch(text, /demo-echo/, 'nor the upstream’s model name');
    t.match(text, /event: error\ndata: [^\n]*ended the stream before \[DONE\][^\n]*"code":"ZN_ERR_UPSTREAM_ERROR"[^\n]*\n\n$/);
    const done = await finishedRequest(setup.node, requestId);
    t.same(done.outcome, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
  }
});

t.test('a messages stream cut inside its last event ends with the node’s error, and nothing of that half event reaches the caller', async (t) => {
  const setup = await startSetup(t);
  setup.body = ANTHROPIC_OPENING + cutAfter(ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: `mail ${EMAIL} please` } }), `${EMAIL} pl`);
  for (const secret of [setup.node.secret, setup.plainSecret]) {
    const { status, text, requestId } = await messagesStream(setup.node, secret);
    t.equal(status, 200);
    if (secret === setup.plainSecret) t.match(text, /"text":"Hello\. "/);
    t.notMatch(text, EMAIL, 'the e-mail is not delivered');
    t.match(text, /event: error\ndata: [^\n]*ended the stream before message_stop[^\n]*"ZN_ERR_UPSTREAM_ERROR"[^\n]*\n\n$/);
    const done = await finishedRequest(setup.node, requestId);
    t.same(done.outcome, { status: 'failed', httpStatus: 200, errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
  }
});

t.test('a whole chat event whose data is not a JSON object ends a stream under output rules with ZN_ERR_GUARDRAIL_BLOCKED, and passes as it came without them', async (t) => {
  const setup = await startSetup(t);
  setup.body = chatChunk('Hello. ') + `data: note for ${EMAIL}\n\n` + chatChunk(null) + 'data: [DONE]\n\n';
  const guarded = await chatStream(setup.node, setup.node.secret);
  t.equal(guarded.status, 200, 'the stream had started');
  t.notMatch(guarded.text, EMAIL, 'the unchecked text is not delivered');
  t.match(guarded.text, /event: error\ndata: [^\n]*not a JSON object[^\n]*"code":"ZN_ERR_GUARDRAIL_BLOCKED"[^\n]*\n\n$/);
  t.notMatch(guarded.text, /\[DONE\]/);
  const plain = await chatStream(setup.node, setup.plainSecret);
  t.match(plain.text, `\n\ndata: note for ${EMAIL}\n\n`, 'without output rules it is relayed as before');
  t.match(plain.text, /data: \[DONE\]\n\n$/);
});

t.test('a whole messages event whose data is not a JSON object ends a stream under output rules with ZN_ERR_GUARDRAIL_BLOCKED, and passes as it came without them', async (t) => {
  const setup = await startSetup(t);
  setup.body =
    ANTHROPIC_OPENING +
    `event: content_block_delta\ndata: note for ${EMAIL}\n\n` +
    ev('content_block_stop', { index: 0 }) +
    ev('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 3 } }) +
    ev('message_stop');
  const guarded = await messagesStream(setup.node, setup.node.secret);
  t.equal(guarded.status, 200, 'the stream had started');
  t.notMatch(guarded.text, EMAIL, 'the unchecked text is not delivered');
  t.match(guarded.text, /event: error\ndata: [^\n]*not a JSON object[^\n]*"ZN_ERR_GUARDRAIL_BLOCKED"[^\n]*\n\n$/);
  t.notMatch(guarded.text, /message_stop/);
  const plain = await messagesStream(setup.node, setup.plainSecret);
  t.match(plain.text, `event: content_block_delta\ndata: note for ${EMAIL}\n\n`, 'without output rules it is relayed as before');
  t.match(plain.text, /event: message_stop\n[^\n]*\n\n$/);
});
