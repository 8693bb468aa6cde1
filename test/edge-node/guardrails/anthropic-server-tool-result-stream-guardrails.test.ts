// Guardrails over the results of Anthropic's server tools (web search, web fetch, code execution,
// MCP), which a stream carries whole in their content_block_start with no deltas after: through a
// listening node with the official @anthropic-ai/sdk and a scripted upstream, each text of such a
// block is checked whole in that event (masked in place, or ending the stream on a block rule),
// nothing waits for deltas that never come, and a block nothing matched goes out byte for byte.
// The same texts in a JSON answer are checked too (one walk for both): every string in a result,
// whatever its field, but opaque ids and encodings. A flag rule is checked on the provider's own
// events under the stream guard, where its verdict can be read. Result and citation texts are not
// the model's output: neither metered as output tokens of a cut stream nor recorded as its response;
// a cut stream's input counts the results delivered (Anthropic bills them as input). A result or
// citation that repeats a key goes out as parsed and checked, never with the value JSON.parse dropped.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import { guardStream } from '../../../edge-node/src/guardrails/stream-guard.js';
import { AbortSwitch } from '../../../edge-node/src/pipeline/abort-switch.js';
import { anthropicStreamEvents, deltaEventLike, errorStreamEvent } from '../../../edge-node/src/providers/anthropic/messages-stream.js';
import { estimateTokens } from '../../../edge-node/src/providers/token-estimate.js';
import type { GuardrailRule, RequestRecord } from '../../../proto/src/index.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { anthropicSdkError } from '../anthropic-fixtures.js';
import { startGuardedNode } from './guarded-node.js';
import { drain, guardContext, policy } from './guardrail-fixtures.js';
import type { StreamReply } from './guardrail-fixtures.js';
import { sseData } from './scripted-upstream.js';

/** These streams come whole from memory: no gap to bound. */
const NO_IDLE_DEADLINE = { ms: 60_000, stop: (): void => undefined };

const SECRET = 'sk-proj-Abc123Def456Ghi789Jkl0';
const RULES: GuardrailRule[] = [
  { detector: 'email', action: 'mask', on: 'both' },
  { detector: 'secret', action: 'block', on: 'both' },
];
// Web fetch: the node refuses the per-use-billed web search tool, while the scripted upstream's
// answers (search results among them) are whatever a compatible upstream may send.
const TOOLS = [{ type: 'web_fetch_20250910' as const, name: 'web_fetch' as const }];
const USER = [{ role: 'user' as const, content: 'who runs the project?' }];

const event = (type: string, body: Record<string, unknown>): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`;
const MESSAGE_START = event('message_start', {
  message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } },
});
const MESSAGE_END = [event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 20 } }), event('message_stop', {})];
/** The server's call, as Anthropic streams it: an empty input, then its JSON in a delta. */
const SEARCH_CALL = [
  event('content_block_start', { index: 0, content_block: { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} } }),
  event('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: '{"query":"project lead"}' } }),
  event('content_block_stop', { index: 0 }),
];
const searchResult = (title: string, url: string): Record<string, unknown> => ({ type: 'web_search_result', title, url, encrypted_content: 'EqgfCioIARgBIiQ3YTAwMjY1', page_age: 'April 30, 2025' });
/** A whole block in its content_block_start, then its stop: how Anthropic streams a server tool's result. */
const wholeBlock = (index: number, block: Record<string, unknown>): string[] => [event('content_block_start', { index, content_block: block }), event('content_block_stop', { index })];
const answerText = (index: number, text: string): string[] => [
  event('content_block_start', { index, content_block: { type: 'text', text: '' } }),
  event('content_block_delta', { index, delta: { type: 'text_delta', text } }),
  event('content_block_stop', { index }),
];

const MASKED_SEARCH = {
  type: 'web_search_tool_result',
  tool_use_id: 'srvtoolu_1',
  content: [searchResult('Contact bob@corp.test for access', 'https://corp.test/team?owner=eve@corp.test'), searchResult('Team page', 'https://corp.test/team')],
};

type WireEvent = { type: string; index?: number; content_block?: Record<string, unknown> };
const wireEvents = (body: string): WireEvent[] => sseData(body).map((data) => JSON.parse(data) as WireEvent);
/** A JSON answer of `content`, as the scripted upstream sends it. */
const jsonAnswer = (content: unknown[], outputTokens = 7): { json: Record<string, unknown> } => ({
  json: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content, stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 5, output_tokens: outputTokens } },
});

t.test('guardrails over Anthropic server tool results in streams', async (t) => {
  const { upstream, node } = await startGuardedNode(t, RULES);
  const client = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
  const streamBody = async (): Promise<{ status: number; body: string }> => {
    const res = await fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret },
      body: JSON.stringify({ model: 'claude', max_tokens: 100, stream: true, messages: USER, tools: TOOLS }),
    });
    return { status: res.status, body: await res.text() };
  };

  await t.test("e-mails in a streamed web_search_tool_result's titles and URLs are masked in its content_block_start, which the SDK assembles", async (t) => {
    upstream.answer = { sse: [MESSAGE_START, ...SEARCH_CALL, ...wholeBlock(1, MASKED_SEARCH), ...answerText(2, 'Ask the team.'), ...MESSAGE_END] };
    const message = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS }).finalMessage();
    t.same(message.content[1], {
      type: 'web_search_tool_result',
      tool_use_id: 'srvtoolu_1',
      content: [searchResult('Contact [EMAIL] for access', 'https://corp.test/team?owner=[EMAIL]'), searchResult('Team page', 'https://corp.test/team')],
    });
    t.match(message.content[2], { type: 'text', text: 'Ask the team.' });
    const { body } = await streamBody();
    t.notMatch(body, /bob@|eve@/, 'no address goes out');
    const own = wireEvents(body).filter((e) => e.index === 1);
    t.same(
      own.map((e) => e.type),
      ['content_block_start', 'content_block_stop'],
      'the block goes out in its own start event, with no delta added after it',
    );
  });

  const OTHER_RESULTS: Record<string, Record<string, unknown>> = {
    web_fetch_tool_result: {
      type: 'web_fetch_tool_result',
      tool_use_id: 'srvtoolu_2',
      content: {
        type: 'web_fetch_result',
        url: 'https://corp.test/about',
        retrieved_at: '2025-08-25T10:30:00Z',
        content: { type: 'document', title: 'About', source: { type: 'text', media_type: 'text/plain', data: 'Write to bob@corp.test today.' }, citations: { enabled: true } },
      },
    },
    code_execution_tool_result: {
      type: 'code_execution_tool_result',
      tool_use_id: 'srvtoolu_3',
      content: { type: 'code_execution_result', stdout: 'owner: bob@corp.test\n', stderr: '', return_code: 0, content: [] },
    },
    bash_code_execution_tool_result: {
      type: 'bash_code_execution_tool_result',
      tool_use_id: 'srvtoolu_4',
      content: { type: 'bash_code_execution_result', stdout: '', stderr: 'mail to bob@corp.test failed', return_code: 1, content: [{ type: 'bash_code_execution_output', file_id: 'file_1' }] },
    },
    mcp_tool_result: { type: 'mcp_tool_result', tool_use_id: 'mcptoolu_1', is_error: false, content: [{ type: 'text', text: 'owner is bob@corp.test' }] },
  };
  for (const [type, block] of Object.entries(OTHER_RESULTS)) {
    await t.test(`an e-mail in a streamed ${type} is masked in its content_block_start, the rest of the block as it came`, async (t) => {
      upstream.answer = { sse: [MESSAGE_START, ...wholeBlock(0, block), ...MESSAGE_END] };
      const message = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS }).finalMessage();
      t.same(message.content[0], JSON.parse(JSON.stringify(block).replaceAll('bob@corp.test', '[EMAIL]')) as unknown);
    });
  }

  await t.test('a streamed text, thinking or tool-input delta whose JSON repeats a key goes out as what was checked: the value JSON.parse dropped never reaches the caller', async (t) => {
    const delta = (type: string, field: string, first: string): string =>
      `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"${type}","${field}":${JSON.stringify(first)},"${field}":""}}\n\n`;
    for (const [block, type, field, first] of [
      [{ type: 'text', text: '' }, 'text_delta', 'text', `key ${SECRET}`],
      [{ type: 'thinking', thinking: '' }, 'thinking_delta', 'thinking', `key ${SECRET}`],
      [{ type: 'tool_use', id: 'toolu_1', name: 'lookup', input: {} }, 'input_json_delta', 'partial_json', `{"q":"${SECRET}"}`],
    ] as const) {
      upstream.answer = { sse: [MESSAGE_START, event('content_block_start', { index: 0, content_block: block }), delta(type, field, first), event('content_block_stop', { index: 0 }), ...MESSAGE_END] };
      const { body } = await streamBody();
      t.notMatch(body, /sk-proj/, `${type}: the dropped value is not in what went out`);
      t.match(body, /message_stop/, `${type}: the stream completes`);
    }
  });

  await t.test("a secret in a streamed web_search_tool_result's title ends the stream with the guardrail code, none of the block sent", async (t) => {
    const leaky = { type: 'web_search_tool_result', tool_use_id: 'srvtoolu_1', content: [searchResult(`leaked key ${SECRET}`, 'https://corp.test/leak')] };
    upstream.answer = { sse: [MESSAGE_START, ...SEARCH_CALL, ...wholeBlock(1, leaky), ...answerText(2, 'done'), ...MESSAGE_END] };
    const { status, body } = await streamBody();
    t.equal(status, 200, 'the stream had started');
    t.match(body, /event: error/);
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /sk-proj|Abc123|corp\.test\/leak/, 'nothing of the blocked block goes out');
    t.notMatch(body, /message_stop/);
    t.match(body, /project lead/, 'the server call before it was delivered');
    const err = await anthropicSdkError(client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS }).finalMessage());
    t.equal(err.errorCode, 'ZN_ERR_GUARDRAIL_BLOCKED', 'the SDK raises the stream error with our code');
  });

  await t.test('a streamed web_search_tool_result nothing matched goes out byte for byte, long titles and JSON escapes included, beside one that was masked', async (t) => {
    // Written as no JSON.stringify would (escaped é and slashes), with a title longer than the
    // guard's window: re-serialising the event, or writing back what the guard released first,
    // would show.
    const clean =
      'event: content_block_start\ndata: {"type":"content_block_start","index":2,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1",' +
      `"content":[{"type":"web_search_result","title":"Caf\\u00e9 ${'menu '.repeat(120)}","url":"https:\\/\\/corp.test\\/menu","encrypted_content":"EqgfCioI","page_age":null}]}}\n\n`;
    upstream.answer = { sse: [MESSAGE_START, ...SEARCH_CALL, ...wholeBlock(1, MASKED_SEARCH), clean, event('content_block_stop', { index: 2 }), ...MESSAGE_END] };
    const { body } = await streamBody();
    t.notMatch(body, /bob@|eve@/, 'the other block was masked');
    t.ok(body.includes(clean), 'the unmatched block is the upstream bytes');
    const message = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS }).finalMessage();
    t.match(message.content[2], { type: 'web_search_tool_result', content: [{ title: `Café ${'menu '.repeat(120)}`, url: 'https://corp.test/menu' }] });
  });

  await t.test('a streamed server tool result that repeats a key goes out as it was checked: the value JSON.parse dropped is not sent', async (t) => {
    // JSON.parse keeps the last of two "title" keys (and of two "url" keys, the last not a string):
    // the first values, never checked, must not go out in the event's raw bytes.
    const repeated =
      'event: content_block_start\ndata: {"type":"content_block_start","index":1,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1",' +
      '"content":[{"type":"web_search_result","title":"Mail dave@example.com","title":"Team page","url":"https://corp.test/team?owner=dave@example.com","url":null,' +
      '"encrypted_content":"EqgfCioI","page_age":null}]}}\n\n';
    upstream.answer = { sse: [MESSAGE_START, ...SEARCH_CALL, repeated, event('content_block_stop', { index: 1 }), ...answerText(2, 'Ask the team.'), ...MESSAGE_END] };
    const { body } = await streamBody();
    t.notMatch(body, /dave@/, 'the dropped values are not sent');
    t.ok(body.includes('"content":[{"type":"web_search_result","title":"Team page","url":null,"encrypted_content":"EqgfCioI","page_age":null}]'), 'the block goes out as parsed and checked');
    const message = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS }).finalMessage();
    t.same(message.content[1], { type: 'web_search_tool_result', tool_use_id: 'srvtoolu_1', content: [{ type: 'web_search_result', title: 'Team page', url: null, encrypted_content: 'EqgfCioI', page_age: null }] });
  });

  await t.test('a server tool result nested thousands of levels deep is blocked, streamed or in a JSON answer, instead of exhausting the stack or passing unchecked', async (t) => {
    // Results nest blocks in their content; an upstream answer is not depth-checked as a request is.
    let nested: Record<string, unknown> = { type: 'web_fetch_result', url: 'https://corp.test/deep', content: { type: 'text', text: 'deep' } };
    for (let i = 0; i < 3000; i += 1) nested = { type: 'web_fetch_result', content: nested };
    const deep = { type: 'web_fetch_tool_result', tool_use_id: 'srvtoolu_1', content: nested };
    upstream.answer = { sse: [MESSAGE_START, ...SEARCH_CALL, ...wholeBlock(1, deep), ...answerText(2, 'done'), ...MESSAGE_END] };
    const { status, body } = await streamBody();
    t.equal(status, 200, 'the stream had started');
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.match(body, /nested too deep/);
    t.notMatch(body, /corp\.test\/deep/, 'nothing of the unchecked block goes out');
    upstream.answer = jsonAnswer([deep]);
    const err = await anthropicSdkError(client.messages.create({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS }));
    t.equal(err.errorCode, 'ZN_ERR_GUARDRAIL_BLOCKED');
  });

  // Fields off any list of known text fields: each e-mail (bob@) must be masked. The e-mail-looking
  // strings in opaque fields (eve@: ids, encrypted content, base64 data) are not text and stay.
  const OFF_LIST_RESULTS = [
    {
      type: 'text_editor_code_execution_tool_result',
      tool_use_id: 'srvtoolu_eve@corp.test',
      content: { type: 'text_editor_code_execution_tool_result_error', error_code: 'unavailable', error_message: 'cannot open /home/bob@corp.test/notes.md' },
    },
    {
      type: 'web_search_tool_result',
      tool_use_id: 'srvtoolu_6',
      content: [
        { type: 'web_search_result', title: 'Team', url: 'https://corp.test/team', encrypted_content: 'EqgfeVe eve@corp.test', page_age: 'edited by bob@corp.test', snippet: 'Write to bob@corp.test' },
        // An item without a type, as a compatible upstream may send.
        { title: 'Team', url: 'https://corp.test/team', summary: { lines: ['owner: bob@corp.test'] } },
      ],
    },
    {
      type: 'web_fetch_tool_result',
      tool_use_id: 'srvtoolu_7',
      content: {
        type: 'web_fetch_result',
        url: 'https://corp.test/org.pdf',
        content: { type: 'document', title: 'Org chart of bob@corp.test', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0x eve@corp.test' } },
      },
    },
  ];
  const OFF_LIST_MASKED = JSON.parse(JSON.stringify(OFF_LIST_RESULTS).replaceAll('bob@corp.test', '[EMAIL]')) as unknown[];

  await t.test("e-mails in a streamed server tool result's fields off any list (an editor's error_message, a search result's page_age and snippet, an untyped item) are masked; ids, encrypted content and base64 data are left as they came", async (t) => {
    upstream.answer = { sse: [MESSAGE_START, ...OFF_LIST_RESULTS.flatMap((block, i) => wholeBlock(i, block)), ...MESSAGE_END] };
    const message = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS }).finalMessage();
    t.same(message.content, OFF_LIST_MASKED);
    const { body } = await streamBody();
    t.notMatch(body, /bob@/, 'no address in a text goes out');
    t.equal(body.match(/eve@corp\.test/g)?.length, 3, 'the opaque values go out as they came');
  });

  await t.test("e-mails in a JSON answer's server tool result fields off any list are masked; ids, encrypted content and base64 data are left as they came", async (t) => {
    upstream.answer = jsonAnswer(OFF_LIST_RESULTS);
    const message = await client.messages.create({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS });
    t.same(message.content, OFF_LIST_MASKED);
  });

  await t.test('a streamed server tool result whose only e-mail-looking strings are opaque (a tool_use_id, encrypted content, base64 data) goes out byte for byte', async (t) => {
    // Escaped slashes, as no JSON.stringify writes them: a re-serialised event would show.
    const opaque =
      'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"web_fetch_tool_result","tool_use_id":"srvtoolu_eve@corp.test",' +
      '"content":{"type":"web_fetch_result","url":"https:\\/\\/corp.test\\/org.pdf","content":{"type":"document","source":{"type":"base64","media_type":"application\\/pdf","data":"JVBERi0x eve@corp.test"},' +
      '"citations":[{"type":"char_location","encrypted_index":"Eo eve@corp.test","cited_text":"org chart"}]}}}}\n\n';
    upstream.answer = { sse: [MESSAGE_START, opaque, event('content_block_stop', { index: 0 }), ...MESSAGE_END] };
    const { body } = await streamBody();
    t.ok(body.includes(opaque), 'the block is the upstream bytes');
  });

  await t.test("an e-mail in a JSON answer's web_search_tool_result and web_fetch_tool_result is masked", async (t) => {
    upstream.answer = jsonAnswer([MASKED_SEARCH, OTHER_RESULTS.web_fetch_tool_result, { type: 'text', text: 'Ask the team.' }]);
    const message = await client.messages.create({ model: 'claude', max_tokens: 100, messages: USER, tools: TOOLS });
    t.notMatch(JSON.stringify(message.content), /bob@|eve@/);
    t.match(message.content[0], { content: [{ title: 'Contact [EMAIL] for access', url: 'https://corp.test/team?owner=[EMAIL]' }, { title: 'Team page' }] });
    t.match(message.content[1], { content: { url: 'https://corp.test/about', content: { title: 'About', source: { data: 'Write to [EMAIL] today.' } } } });
  });
});

t.test("a flag rule records a verdict for a streamed server tool result's text and leaves its event as it came", async (t) => {
  const p = policy('watch', [{ detector: 'email', action: 'flag', on: 'output' }]);
  const { ctx } = guardContext({ policies: [p], policyId: 'watch', stream: true });
  const wire = [MESSAGE_START, ...wholeBlock(0, MASKED_SEARCH), ...MESSAGE_END];
  async function* upstreamBody(): AsyncGenerator<Uint8Array> {
    for (const text of wire) yield new TextEncoder().encode(text);
  }
  const reply: StreamReply = {
    kind: 'stream',
    status: 200,
    headers: {},
    events: anthropicStreamEvents(upstreamBody(), { ctx, upstream: 'up', alias: 'claude', sentAt: 0, signal: new AbortSwitch(), release: () => undefined, idle: NO_IDLE_DEADLINE }),
    textEvent: deltaEventLike,
    errorEvent: errorStreamEvent,
  };
  guardStream(ctx, compilePolicy(p), reply);
  const { events, error } = await drain(reply);
  t.equal(error, undefined);
  t.same(
    events.map((e) => `event: ${e.event}\ndata: ${e.data}\n\n`),
    wire,
    'every event goes out as the upstream sent it',
  );
  t.same(ctx.guardrails, [{ policyId: 'watch', rule: 0, detector: 'email', action: 'flag', on: 'output', matches: 2 }]);
});

t.test("server tool results and citations are not the model's output: not metered as output tokens of a cut stream, not kept as the recorded response; a cut stream's input counts the results it delivered", async (t) => {
  const records: RequestRecord[] = [];
  const spool = { open: () => undefined, finalise: async (record: RequestRecord) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const { upstream, node, plainSecret } = await startGuardedNode(t, RULES, { spool });
  const recordOf = (requestId: string | null): Promise<RequestRecord> => waitFor(() => records.find((r) => r.requestId === requestId), { what: `the record of ${String(requestId)}` });
  // A fetched page of about 114 KB (some 28 000 tokens by the estimate), and a long quote of it.
  const page = 'The project charter, section by section. '.repeat(2800);
  const quote = page.slice(0, 2000);
  const fetched = {
    type: 'web_fetch_tool_result',
    tool_use_id: 'srvtoolu_1',
    content: { type: 'web_fetch_result', url: 'https://corp.test/charter', content: { type: 'document', title: 'Charter', source: { type: 'text', media_type: 'text/plain', data: page } } },
  };
  const citation = { type: 'char_location', cited_text: quote, document_index: 0, document_title: 'Charter', start_char_index: 0, end_char_index: 2000 };
  const fetchCall = { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_fetch', input: { url: 'https://corp.test/charter' } };
  const fetchInput = JSON.stringify(fetchCall.input);

  for (const [who, apiKey] of [['a key without guardrails', plainSecret], ['a key with output rules', node.secret]] as const) {
    await t.test(`for ${who}, a stream the upstream cuts before message_delta is metered for the model's text as output and the fetched page as input, not the quote`, async (t) => {
      upstream.answer = {
        sse: [
          MESSAGE_START,
          event('content_block_start', { index: 0, content_block: { ...fetchCall, input: {} } }),
          event('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: fetchInput } }),
          event('content_block_stop', { index: 0 }),
          ...wholeBlock(1, fetched),
          event('content_block_start', { index: 2, content_block: { type: 'text', text: '' } }),
          event('content_block_delta', { index: 2, delta: { type: 'citations_delta', citation } }),
          event('content_block_delta', { index: 2, delta: { type: 'text_delta', text: 'The charter sets the scope.' } }),
          event('content_block_stop', { index: 2 }),
          // No message_delta, no message_stop: the upstream ends here.
        ],
      };
      const res = await fetch(`${node.origin}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': apiKey },
        body: JSON.stringify({ model: 'claude', max_tokens: 100, stream: true, messages: USER }),
      });
      const body = await res.text();
      t.ok(body.includes(page.slice(0, 500)) && body.includes('The charter sets the scope.'), 'the result and the text were delivered');
      t.match(body, /event: error/, 'the caller is told the stream broke');
      const record = await recordOf(res.headers.get('x-request-id'));
      t.match(record, { status: 'failed', errorCode: 'ZN_ERR_UPSTREAM_ERROR' });
      const written = `${fetchInput}The charter sets the scope.`;
      // Anthropic bills the fetched result as input but counts it only in message_delta: the
      // node adds its estimate (each string of the result; the citation's quote is not billed).
      const resultTokens = estimateTokens(fetched.content.url) + estimateTokens(fetched.content.content.title) + estimateTokens(page);
      t.same(
        record.usage,
        { inputTokens: 5 + resultTokens, outputTokens: estimateTokens(written), estimated: true },
        "input is message_start's count and the delivered result's estimate; output is estimated from what the model wrote: the call and the text",
      );
      t.equal(record.bodies?.response, written, 'the recorded response holds neither the page nor the quote');
    });
  }

  await t.test("a JSON answer's recorded response holds the model's text, not the result it fetched nor the quotes it cites", async (t) => {
    upstream.answer = jsonAnswer([fetchCall, fetched, { type: 'text', text: 'The charter sets the scope.', citations: [citation] }], 40);
    const { response } = await new Anthropic({ baseURL: node.origin, apiKey: plainSecret, maxRetries: 0, timeout: 20_000 })
      .messages.create({ model: 'claude', max_tokens: 100, messages: USER })
      .withResponse();
    const record = await recordOf(response.headers.get('x-request-id'));
    t.same(record.usage, { inputTokens: 5, outputTokens: 40, estimated: false });
    t.equal(record.bodies?.response, `${fetchInput}The charter sets the scope.`);
  });
});
