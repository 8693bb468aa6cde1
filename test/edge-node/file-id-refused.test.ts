// A request naming an uploaded file by its file_id — on /v1/messages an image or document block
// whose source is {type:'file', file_id}, a container_upload block, such a block inside a tool
// result; on /v1/chat/completions a `file` part's `file.file_id` — is refused before anything is
// forwarded: the file is in the operator's upstream account, which every caller of the node shares,
// so one tenant could have the model read another's upload. The refusal names the field. File
// content sent inline, a tool call's own `file_id` argument and a citation's null file_id pass.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import { anthropicSdkError } from './anthropic-fixtures.js';
import { startScriptedUpstream } from './guardrails/scripted-upstream.js';
import { startPipelineNode } from './pipeline/pipeline-harness.js';

const CLAUDE_ANSWER = {
  id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content: [{ type: 'text', text: 'read it' }],
  stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 5, output_tokens: 2 },
};
const CHAT_ANSWER = {
  id: 'c1', object: 'chat.completion', created: 1, model: 'demo-echo',
  choices: [{ index: 0, message: { role: 'assistant', content: 'read it' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
};
const PDF = Buffer.from('%PDF-1.4 tiny').toString('base64');

async function setUp(t: { teardown(fn: () => unknown): void }) {
  const upstream = await startScriptedUpstream(t);
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    bundle: (base) => ({
      upstreams: [...base.upstreams, { id: 'up-claude', name: 'claude', kind: 'anthropic', baseUrl: upstream.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 30_000 }],
      routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 }],
    }),
  });
  return { upstream, node };
}

async function post(origin: string, path: string, secret: string, body: unknown) {
  const res = await fetch(`${origin}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': secret, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(15_000),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const ask = (content: unknown[]) => ({ model: 'claude', max_tokens: 10, messages: [{ role: 'user', content }] });

t.test('a /v1/messages request naming an uploaded file by its file_id is refused with ZN_ERR_FILE_ID_NOT_ALLOWED naming the field, and nothing is forwarded', async (t) => {
  const { upstream, node } = await setUp(t);
  const cases: Array<[string, unknown, string]> = [
    ['a document whose source is a file', ask([{ type: 'text', text: 'summarise' }, { type: 'document', source: { type: 'file', file_id: 'file_011CNha8iCJcU1wXNR6q4V8w' } }]), 'messages[0].content[1].source.file_id'],
    ['an image whose source is a file', ask([{ type: 'image', source: { type: 'file', file_id: 'file_abc' } }]), 'messages[0].content[0].source.file_id'],
    ['a container_upload block', ask([{ type: 'container_upload', file_id: 'file_abc' }]), 'messages[0].content[0].file_id'],
    [
      'a file image inside a tool result',
      {
        model: 'claude', max_tokens: 10,
        messages: [
          { role: 'user', content: 'look' },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'shot', input: {} }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'image', source: { type: 'file', file_id: 'file_abc' } }] }] },
        ],
      },
      'messages[2].content[0].content[0].source.file_id',
    ],
  ];
  for (const [what, body, field] of cases) {
    const answer = await post(node.origin, '/v1/messages', node.secret, body);
    t.equal(answer.status, 400, what);
    t.match(answer.body, { type: 'error', error: { type: 'invalid_request_error', code: 'ZN_ERR_FILE_ID_NOT_ALLOWED', details: { error_code: 'ZN_ERR_FILE_ID_NOT_ALLOWED' } } }, `${what}: Anthropic's shape, our code`);
    t.match((answer.body.error as { message: string }).message, field, `${what}: the message names ${field}`);
  }
  t.equal(upstream.requests.length, 0, 'no request reached the upstream');

  const client = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 15_000 });
  const err = await anthropicSdkError(client.messages.create(ask([{ type: 'document', source: { type: 'file', file_id: 'file_abc' } }]) as Anthropic.MessageCreateParamsNonStreaming));
  t.ok(err instanceof Anthropic.BadRequestError, "the SDK's BadRequestError, not retried");
  t.equal(err.errorCode, 'ZN_ERR_FILE_ID_NOT_ALLOWED');
});

t.test('/v1/messages content sent inline, a tool call’s own file_id argument and a citation’s null file_id pass', async (t) => {
  const { upstream, node } = await setUp(t);
  upstream.answer = { json: CLAUDE_ANSWER };
  const body = {
    model: 'claude', max_tokens: 10,
    messages: [
      { role: 'user', content: [{ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: PDF } }, { type: 'text', text: 'open file_7 in my app' }] },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'opening', citations: [{ type: 'char_location', cited_text: 'x', document_index: 0, document_title: null, start_char_index: 0, end_char_index: 1, file_id: null }] },
          { type: 'tool_use', id: 'toolu_1', name: 'open_file', input: { file_id: 'file_7' } },
        ],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'opened' }] },
    ],
  };
  const answer = await post(node.origin, '/v1/messages', node.secret, body);
  t.equal(answer.status, 200);
  t.equal(upstream.requests.length, 1, 'forwarded');
  t.match(upstream.requests[0]!.body, { messages: [{}, { content: [{}, { input: { file_id: 'file_7' } }] }] }, 'the tool call went as sent');
});

t.test('a chat completion part naming an uploaded file by its file_id is refused naming the field, and nothing is forwarded; file_data passes', async (t) => {
  const { upstream, node } = await setUp(t);
  upstream.answer = { json: CHAT_ANSWER };
  const chat = (part: Record<string, unknown>) => ({ model: 'echo', messages: [{ role: 'user', content: [{ type: 'text', text: 'summarise' }, part] }] });
  const refused = await post(node.origin, '/v1/chat/completions', node.secret, chat({ type: 'file', file: { file_id: 'file-abc123' } }));
  t.equal(refused.status, 400);
  t.match(refused.body, { error: { type: 'invalid_request_error', param: 'messages[0].content[1].file.file_id' } });
  t.match((refused.body.error as { message: string }).message, /file_id.*shared by every caller/);
  t.equal(upstream.requests.length, 0, 'no request reached the upstream');

  const inline = await post(node.origin, '/v1/chat/completions', node.secret, chat({ type: 'file', file: { filename: 'a.pdf', file_data: `data:application/pdf;base64,${PDF}`, file_id: null } }));
  t.equal(inline.status, 200, 'the file sent inline passes');
  t.equal(upstream.requests.length, 1);
});
