// Guardrails over what Anthropic answers quote: a text block's citations (the quoted `cited_text`,
// the cited source's title, URL and search result source) and a text editor's result lines, through a listening node
// with the official @anthropic-ai/sdk and a scripted upstream. In a stream a `citations_delta`
// carries one whole citation between a block's text deltas: its texts are checked whole in that
// event (masked in place, or ending the stream on a block rule) while the block's own text stays
// one running text around it, so a match split across the deltas before and after a citation is
// still found. The same texts in a JSON answer and in an assistant turn sent back are checked too.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { anthropicSdkError } from '../anthropic-fixtures.js';
import { startGuardedNode } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';

const SECRET = 'sk-proj-Abc123Def456Ghi789Jkl0';
const RULES: GuardrailRule[] = [
  { detector: 'email', action: 'mask', on: 'both' },
  { detector: 'secret', action: 'block', on: 'both' },
];
const USER = [{ role: 'user' as const, content: 'who runs the project?' }];

const event = (type: string, body: Record<string, unknown>): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`;
const delta = (index: number, d: Record<string, unknown>): string => event('content_block_delta', { index, delta: d });
const MESSAGE_START = event('message_start', {
  message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } },
});
const MESSAGE_END = [event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 20 } }), event('message_stop', {})];

const charCitation = (citedText: string): Record<string, unknown> => ({
  type: 'char_location',
  cited_text: citedText,
  document_index: 0,
  document_title: 'Team page',
  start_char_index: 0,
  end_char_index: 33,
  file_id: null,
});
const webCitation = (citedText: string, title: string, url: string): Record<string, unknown> => ({ type: 'web_search_result_location', cited_text: citedText, encrypted_index: 'Eo8BCioIAhgB', title, url });
/** A text block whose text goes on around a citation, as Anthropic streams a cited claim. */
const citedTextBlock = (index: number, before: string, citation: Record<string, unknown>, after: string): string[] => [
  event('content_block_start', { index, content_block: { type: 'text', text: '' } }),
  delta(index, { type: 'text_delta', text: before }),
  delta(index, { type: 'citations_delta', citation }),
  delta(index, { type: 'text_delta', text: after }),
  event('content_block_stop', { index }),
];
const answerWith = (content: unknown[]): { json: unknown } => ({
  json: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-real', content, stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 5, output_tokens: 7 } },
});
const editorResult = (lines: string[]): Record<string, unknown> => ({
  type: 'text_editor_code_execution_tool_result',
  tool_use_id: 'srvtoolu_5',
  content: { type: 'text_editor_code_execution_str_replace_result', lines, new_lines: lines.length, new_start: 1, old_lines: 1, old_start: 1 },
});

type WireEvent = { type: string; index?: number; delta?: { type: string } };
const wireEvents = (body: string): WireEvent[] => sseData(body).map((data) => JSON.parse(data) as WireEvent);

t.test('guardrails over Anthropic citations and text editor lines', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, RULES);
  const client = new Anthropic({ baseURL: node.origin, apiKey: node.secret, maxRetries: 0, timeout: 20_000 });
  const streamBody = async (apiKey = node.secret): Promise<{ status: number; body: string }> => {
    const res = await fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': apiKey },
      body: JSON.stringify({ model: 'claude', max_tokens: 100, stream: true, messages: USER }),
    });
    return { status: res.status, body: await res.text() };
  };

  await t.test("an e-mail in a streamed citations_delta's cited_text is masked in that event, and an e-mail split across the text deltas around it is still masked as one", async (t) => {
    // Block 0: its text deltas are channel 0, so a citation ending "its block's" channel would flush them.
    upstream.answer = {
      sse: [
        MESSAGE_START,
        ...citedTextBlock(0, 'Write to dave@exa', charCitation('Contact bob@corp.test for access.'), 'mple.com for the report.'),
        ...citedTextBlock(1, 'The lead is eve@exa', webCitation('Eve leads it.', 'Team of carol@corp.test', 'https://corp.test/team?owner=carol@corp.test'), 'mple.com.'),
        ...MESSAGE_END,
      ],
    };
    const message = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER }).finalMessage();
    t.same(message.content, [
      { type: 'text', text: 'Write to [EMAIL] for the report.', citations: [charCitation('Contact [EMAIL] for access.')] },
      { type: 'text', text: 'The lead is [EMAIL].', citations: [webCitation('Eve leads it.', 'Team of [EMAIL]', 'https://corp.test/team?owner=[EMAIL]')] },
    ]);
    const { body } = await streamBody();
    t.notMatch(body, /bob@|dave@|eve@|carol@|@exa|mple\.com/, 'no address, and no part of a split one, goes out');
    t.same(
      wireEvents(body)
        .filter((e) => e.index === 0)
        .map((e) => e.delta?.type ?? e.type),
      ['content_block_start', 'text_delta', 'citations_delta', 'text_delta', 'text_delta', 'content_block_stop'],
      'the citation goes out in its own event, in place; the text held across it goes out just before the block ends',
    );
  });

  await t.test("an e-mail in a compatible upstream's content_block_start citations is masked there, the opening text still one text with its deltas", async (t) => {
    upstream.answer = {
      sse: [
        MESSAGE_START,
        event('content_block_start', { index: 0, content_block: { type: 'text', text: 'Write to dave@exa', citations: [charCitation('Contact bob@corp.test for access.')] } }),
        delta(0, { type: 'text_delta', text: 'mple.com now.' }),
        event('content_block_stop', { index: 0 }),
        ...MESSAGE_END,
      ],
    };
    const message = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER }).finalMessage();
    t.same(message.content, [{ type: 'text', text: 'Write to [EMAIL] now.', citations: [charCitation('Contact [EMAIL] for access.')] }]);
  });

  await t.test('a citations_delta with no text in its citation ends none of the text around it: an e-mail split across it is still masked as one', async (t) => {
    upstream.answer = {
      sse: [MESSAGE_START, ...citedTextBlock(0, 'Write to dave@exa', { type: 'page_location', document_index: 0, start_page_number: 1, end_page_number: 2 }, 'mple.com now.'), ...MESSAGE_END],
    };
    const message = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER }).finalMessage();
    t.match(message.content[0], { type: 'text', text: 'Write to [EMAIL] now.' });
  });

  await t.test("a secret in a streamed citation's cited_text ends the stream with the guardrail code, none of the citation sent", async (t) => {
    upstream.answer = {
      sse: [MESSAGE_START, ...citedTextBlock(0, 'The key is ', charCitation(`key: ${SECRET}`), 'in the vault.'), ...MESSAGE_END],
    };
    const { status, body } = await streamBody();
    t.equal(status, 200, 'the stream had started');
    t.match(body, /event: error/);
    t.match(body, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(body, /sk-proj|Abc123|citations_delta/, 'nothing of the blocked citation goes out');
    t.notMatch(body, /message_stop/);
    const err = await anthropicSdkError(client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER }).finalMessage());
    t.equal(err.errorCode, 'ZN_ERR_GUARDRAIL_BLOCKED', 'the SDK raises the stream error with our code');
  });

  await t.test('a streamed citation nothing matched goes out byte for byte, JSON escapes and long quotes included, beside one that was masked', async (t) => {
    // Written as no JSON.stringify would (escaped é and slashes), with a quote longer than the
    // guard's window: re-serialising the event, or writing back what the guard released first, would show.
    const clean =
      'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"type":"web_search_result_location",' +
      `"cited_text":"Caf\\u00e9 ${'menu '.repeat(120)}","encrypted_index":"Eo8B","title":"Caf\\u00e9","url":"https:\\/\\/corp.test\\/menu"}}}\n\n`;
    upstream.answer = {
      sse: [
        MESSAGE_START,
        event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
        delta(0, { type: 'text_delta', text: 'See the menu ' }),
        clean,
        delta(0, { type: 'citations_delta', citation: charCitation('Ask bob@corp.test.') }),
        delta(0, { type: 'text_delta', text: 'and ask.' }),
        event('content_block_stop', { index: 0 }),
        ...MESSAGE_END,
      ],
    };
    const { body } = await streamBody();
    t.notMatch(body, /bob@/, 'the other citation was masked');
    t.ok(body.includes(clean), 'the unmatched citation is the upstream bytes');
    const message = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER }).finalMessage();
    t.match(message.content[0], { type: 'text', text: 'See the menu and ask.', citations: [{ cited_text: `Café ${'menu '.repeat(120)}`, url: 'https://corp.test/menu' }, { cited_text: 'Ask [EMAIL].' }] });
    const plain = await streamBody(plainSecret);
    t.ok(plain.body.includes(clean) && plain.body.includes('bob@corp.test'), 'without output rules both go out as they came');
  });

  await t.test("e-mails in a JSON answer's citations are masked: quoted text, titles and URLs", async (t) => {
    upstream.answer = answerWith([
      {
        type: 'text',
        text: 'Bob leads it.',
        citations: [charCitation('Contact bob@corp.test for access.'), webCitation('Mail eve@corp.test.', 'Team of carol@corp.test', 'https://corp.test/team?owner=carol@corp.test')],
      },
    ]);
    const message = await client.messages.create({ model: 'claude', max_tokens: 100, messages: USER });
    t.same(message.content, [
      {
        type: 'text',
        text: 'Bob leads it.',
        citations: [charCitation('Contact [EMAIL] for access.'), webCitation('Mail [EMAIL].', 'Team of [EMAIL]', 'https://corp.test/team?owner=[EMAIL]')],
      },
    ]);
  });

  await t.test("a request's assistant turn sent back with citations has them checked: an e-mail masked in what the upstream receives, a secret refused", async (t) => {
    upstream.answer = answerWith([{ type: 'text', text: 'ok' }]);
    const before = upstream.requests.length;
    const turn = (citedText: string): Anthropic.MessageParam[] => [
      ...USER,
      { role: 'assistant', content: [{ type: 'text', text: 'Bob leads it.', citations: [charCitation(citedText) as unknown as Anthropic.CitationCharLocationParam] }] },
      { role: 'user', content: 'thanks' },
    ];
    await client.messages.create({ model: 'claude', max_tokens: 100, messages: turn('Contact bob@corp.test for access.') });
    const sent = upstream.requests.slice(before);
    t.equal(sent.length, 1);
    t.same((sent[0]!.body as { messages: Array<{ content: unknown }> }).messages[1]!.content, [
      { type: 'text', text: 'Bob leads it.', citations: [charCitation('Contact [EMAIL] for access.')] },
    ]);
    const err = await anthropicSdkError(client.messages.create({ model: 'claude', max_tokens: 100, messages: turn(`key: ${SECRET}`) }));
    t.equal(err.errorCode, 'ZN_ERR_GUARDRAIL_BLOCKED');
    t.equal(upstream.requests.length, before + 1, 'the refused request never reached the upstream');
  });

  await t.test("an e-mail in a search_result_location citation's source is masked, streamed and in a JSON answer, and in a search_result block's source sent back", async (t) => {
    const located = (source: string): Record<string, unknown> => ({
      type: 'search_result_location',
      source,
      title: 'CRM',
      cited_text: 'Dave owns the account.',
      search_result_index: 0,
      start_block_index: 0,
      end_block_index: 0,
    });
    const leaked = located('https://crm.test/contact?email=dave@example.com');
    const masked = located('https://crm.test/contact?email=[EMAIL]');
    upstream.answer = { sse: [MESSAGE_START, ...citedTextBlock(0, 'Dave ', leaked, 'owns it.'), ...MESSAGE_END] };
    const { body } = await streamBody();
    t.notMatch(body, /dave@/, 'the streamed citation source goes out masked');
    const streamed = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER }).finalMessage();
    t.same(streamed.content, [{ type: 'text', text: 'Dave owns it.', citations: [masked] }]);
    upstream.answer = answerWith([{ type: 'text', text: 'Dave owns it.', citations: [leaked] }]);
    const answered = await client.messages.create({ model: 'claude', max_tokens: 100, messages: USER });
    t.same(answered.content, [{ type: 'text', text: 'Dave owns it.', citations: [masked] }]);

    upstream.answer = answerWith([{ type: 'text', text: 'ok' }]);
    const before = upstream.requests.length;
    const searchResult = (source: string): Record<string, unknown> => ({ type: 'search_result', source, title: 'CRM', content: [{ type: 'text', text: 'Dave owns the account.' }] });
    const res = await fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret },
      body: JSON.stringify({ model: 'claude', max_tokens: 100, messages: [{ role: 'user', content: [searchResult('https://crm.test/contact?email=dave@example.com'), { type: 'text', text: 'who owns it?' }] }] }),
    });
    t.equal(res.status, 200);
    t.same((upstream.requests[before]!.body as { messages: Array<{ content: unknown[] }> }).messages[0]!.content[0], searchResult('https://crm.test/contact?email=[EMAIL]'), 'the upstream receives the source masked');
  });

  await t.test('a streamed citation that repeats a key goes out as it was checked: the value JSON.parse dropped is not sent', async (t) => {
    // JSON.parse keeps the last of two "cited_text" keys; the first must not go out in the event's raw bytes.
    const repeated =
      'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"type":"char_location",' +
      '"cited_text":"Mail dave@example.com","cited_text":"Ask the team.","document_index":0,"start_char_index":0,"end_char_index":13}}}\n\n';
    upstream.answer = {
      sse: [MESSAGE_START, event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }), delta(0, { type: 'text_delta', text: 'See ' }), repeated, delta(0, { type: 'text_delta', text: 'the team.' }), event('content_block_stop', { index: 0 }), ...MESSAGE_END],
    };
    const { body } = await streamBody();
    t.notMatch(body, /dave@/, 'the dropped value is not sent');
    t.ok(body.includes('{"type":"citations_delta","citation":{"type":"char_location","cited_text":"Ask the team.","document_index":0'), 'the citation goes out as parsed and checked');
    const message = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER }).finalMessage();
    t.same(message.content, [{ type: 'text', text: 'See the team.', citations: [{ type: 'char_location', cited_text: 'Ask the team.', document_index: 0, start_char_index: 0, end_char_index: 13 }] }]);
  });

  await t.test("an e-mail in a text editor result's lines is masked, streamed and in a JSON answer, each line its own text", async (t) => {
    const lines = ['owner = "bob@corp.test"', 'port = 8080'];
    const masked = editorResult(['owner = "[EMAIL]"', 'port = 8080']);
    upstream.answer = {
      sse: [MESSAGE_START, event('content_block_start', { index: 0, content_block: editorResult(lines) }), event('content_block_stop', { index: 0 }), ...MESSAGE_END],
    };
    const streamed = await client.messages.stream({ model: 'claude', max_tokens: 100, messages: USER }).finalMessage();
    t.same(streamed.content, [masked]);
    upstream.answer = answerWith([editorResult(lines)]);
    const answered = await client.messages.create({ model: 'claude', max_tokens: 100, messages: USER });
    t.same(answered.content, [masked]);
  });
});
