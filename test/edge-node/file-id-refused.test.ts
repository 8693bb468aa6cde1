// A request naming an uploaded file by its file_id — on /v1/messages an image or document block
// whose source is {type:'file', file_id}, a container_upload block, such a block inside a tool
// result; on /v1/chat/completions a content part's `file.file_id` or other `file_id` — is refused
// with ZN_ERR_FILE_ID_NOT_ALLOWED before anything is forwarded: the file is in the operator's
// upstream account, which every caller of the node shares, so one tenant could have the model read
// another's upload. The refusal names the field; a request the schema refuses is refused for that
// first. File content sent inline, a tool call's own `file_id` argument and a citation's null
// file_id pass.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
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

t.test('a chat completion part naming an uploaded file by its file_id is refused with ZN_ERR_FILE_ID_NOT_ALLOWED naming the field, in the words /v1/messages uses, and nothing is forwarded', async (t) => {
  const { upstream, node } = await setUp(t);
  const chat = (part: Record<string, unknown>) => ({
    model: 'echo',
    messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: [part, { type: 'text', text: 'summarise' }] }],
  });
  const cases: Array<[string, unknown, string]> = [
    ['a file part', chat({ type: 'file', file: { file_id: 'file-abc' } }), 'messages[1].content[0].file.file_id'],
    ['a file_id on the part itself', chat({ type: 'input_file', file_id: 'file-abc' }), 'messages[1].content[0].file_id'],
    ['an image_url of a server that takes ids', chat({ type: 'image_url', image_url: { file_id: 'file-abc' } }), 'messages[1].content[0].image_url.file_id'],
    [
      'a file part in the prediction',
      { model: 'echo', messages: [{ role: 'user', content: 'x' }], prediction: { type: 'content', content: [{ type: 'file', file: { file_id: 'file-abc' } }] } },
      'prediction.content[0].file.file_id',
    ],
  ];
  for (const [what, body, field] of cases) {
    const answer = await post(node.origin, '/v1/chat/completions', node.secret, body);
    t.equal(answer.status, 400, what);
    t.same(answer.body, {
      error: {
        message: `Invalid request: ${field}: files in the upstream provider's account are shared by every caller of this node, so a file_id is not passed on; send the file's content (file_data) instead.`,
        type: 'invalid_request_error',
        param: field,
        code: 'ZN_ERR_FILE_ID_NOT_ALLOWED',
      },
    }, `${what}: OpenAI's shape, our code, the field named`);
  }
  t.equal(upstream.requests.length, 0, 'no request reached the upstream');

  const client = new OpenAI({ baseURL: `${node.origin}/v1`, apiKey: node.secret, maxRetries: 0, timeout: 15_000 });
  const err: unknown = await client.chat.completions.create(chat({ type: 'file', file: { file_id: 'file-abc' } }) as OpenAI.ChatCompletionCreateParamsNonStreaming).then(
    () => undefined,
    (error: unknown) => error,
  );
  t.ok(err instanceof OpenAI.BadRequestError, "the SDK's BadRequestError, not retried");
  t.match(err, { code: 'ZN_ERR_FILE_ID_NOT_ALLOWED', param: 'messages[1].content[0].file.file_id' });
});

t.test('a chat request that breaks the schema as well is refused for the schema first, as /v1/messages is', async (t) => {
  const { upstream, node } = await setUp(t);
  const body = { model: 'echo', stream: 'yes', messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: 'file-abc' } }] }] };
  const answer = await post(node.origin, '/v1/chat/completions', node.secret, body);
  t.equal(answer.status, 400);
  t.match(answer.body, { error: { param: 'stream', code: 'ZN_ERR_INVALID_REQUEST' } });
  t.equal(upstream.requests.length, 0);
});

t.test('chat content sent inline, a null file_id, and a tool call or tool message mentioning file_id in its text pass', async (t) => {
  const { upstream, node } = await setUp(t);
  upstream.answer = { json: CHAT_ANSWER };
  const body = {
    model: 'echo',
    messages: [
      { role: 'user', content: [{ type: 'text', text: 'summarise' }, { type: 'file', file: { filename: 'a.pdf', file_data: `data:application/pdf;base64,${PDF}`, file_id: null } }] },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'open_file', arguments: '{"file_id":"file_7"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: [{ type: 'text', text: '{"file_id":"file_7","opened":true}' }] },
    ],
  };
  const answer = await post(node.origin, '/v1/chat/completions', node.secret, body);
  t.equal(answer.status, 200);
  t.equal(upstream.requests.length, 1, 'forwarded');
  t.match(upstream.requests[0]!.body, { messages: [{ content: [{}, { file: { file_id: null } }] }, { tool_calls: [{ function: { arguments: '{"file_id":"file_7"}' } }] }] }, 'sent as written');
});
