// The prompt estimate counts what a chat template renders around every message, not only the
// messages' text: OpenAI bills about 3 tokens per message plus its role (and 3 priming the answer)
// even when the content is "". Counting only text, thousands of empty messages reserved almost
// nothing and cost thousands of tokens each: 40 concurrent callers overspent a 20 000 µ lease 23-29
// times. The same for Anthropic's messages and content blocks.
import http from 'node:http';
import t from 'tap';
import { pino } from 'pino';
import type { RequestRecord } from '../../../proto/src/index.js';
import { DEFAULT_CREDIT_POLICY } from '../../../edge-node/src/billing/credit-policy.js';
import { LeaseBook } from '../../../edge-node/src/billing/lease-book.js';
import { LeaseCredit } from '../../../edge-node/src/billing/lease-credit.js';
import { memoryLeaseStore } from '../../../edge-node/src/billing/lease-store.js';
import { chatSectionTokens, messagesSectionTokens } from '../../../edge-node/src/billing/prompt-sections.js';
import { waitFor } from '../../fixtures/wait-for.js';
import { recordsInto } from '../anthropic-fixtures.js';
import { ACCOUNT_ID } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import { claudeRequestRecord, startPricedClaudeNode } from './priced-claude-node.js';

/**
 * An OpenAI-compatible upstream that bills a prompt as OpenAI documents it (Cookbook, "How to count
 * tokens with tiktoken"): 3 priming + per message 3 + its role (1) + its content / 4; one output token.
 */
async function openAiBillingUpstream(t: { teardown(fn: () => unknown): void }): Promise<string> {
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (chunk: Buffer) => (raw += chunk.toString()));
    req.on('end', () => {
      const body = JSON.parse(raw) as { messages: Array<{ content: unknown }> };
      let prompt = 3;
      for (const m of body.messages) prompt += 4 + Math.ceil((typeof m.content === 'string' ? m.content.length : 0) / 4);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({
        id: 'c1', object: 'chat.completion', created: 1, model: 'up',
        choices: [{ index: 0, message: { role: 'assistant', content: 'k' }, finish_reason: 'length' }],
        usage: { prompt_tokens: prompt, completion_tokens: 1, total_tokens: prompt + 1 },
      }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as { port: number }).port}/v1`;
}

/** A node whose account holds `leaseMicros`, `echo` at 1 µ per input and output token, its records kept. */
async function billingNode(t: Parameters<typeof openAiBillingUpstream>[0], leaseMicros: number) {
  const upstreamUrl = await openAiBillingUpstream(t);
  const book = new LeaseBook(memoryLeaseStore);
  book.grant({ accountId: ACCOUNT_ID, leaseId: 'lease-1', amountMicros: leaseMicros, expiresAt: Date.now() + 600_000 });
  const records: RequestRecord[] = [];
  const node = await startPipelineNode(t, {
    upstreamUrl,
    bundle: () => ({ prices: [{ model: 'echo', inputMicrosPerToken: 1, outputMicrosPerToken: 1, requestMicros: 0 }] }),
    services: { credit: new LeaseCredit(book, DEFAULT_CREDIT_POLICY, pino({ level: 'silent' })), spool: recordsInto(records) },
  });
  const send = async (body: string): Promise<number> => {
    const res = await fetch(`${node.origin}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${node.secret}` }, body });
    await res.arrayBuffer();
    return res.status;
  };
  return { book, records, send };
}

const emptyMessages = (count: number): string =>
  JSON.stringify({ model: 'echo', max_tokens: 1, messages: Array.from({ length: count }, () => ({ role: 'user', content: '' })) });

t.test('a chat request of a thousand empty messages reserves at least what OpenAI bills for them', async (t) => {
  const { records, send } = await billingNode(t, 1_000_000);
  t.equal(await send(emptyMessages(1_000)), 200);
  const record = await waitFor(() => records[0], { what: 'the record' });
  t.equal(record.cost.costMicros, 3 + 1_000 * 4 + 1, 'billed: priming, 4 per message, one output token');
  t.ok(record.cost.reservedMicros >= record.cost.costMicros, `reserved ${record.cost.reservedMicros} µ for a cost of ${record.cost.costMicros} µ`);
});

t.test('forty concurrent callers of empty-message requests cannot overspend the lease', async (t) => {
  const LEASE = 20_000;
  const CALLERS = 40;
  const { book, records, send } = await billingNode(t, LEASE);
  const body = emptyMessages(2_000);
  const statuses = await Promise.all(Array.from({ length: CALLERS }, () => send(body)));
  await waitFor(() => records.length >= CALLERS || undefined, { what: 'every record' });
  const charged = records.reduce((sum, r) => sum + r.cost.costMicros, 0);
  t.ok(statuses.includes(200), 'one fits the lease');
  t.ok(statuses.filter((s) => s === 402).length > 0, 'the rest are refused: the lease cannot cover them');
  t.ok(charged <= LEASE, `charged ${charged} µ against a lease of ${LEASE} µ`);
  t.ok(book.leaseOf(ACCOUNT_ID)!.available >= 0, 'the lease is never overdrawn');
});

t.test('the chat estimate counts each message\'s frame, role and name, a tool message\'s call id and an assistant\'s tool call ids and names', async (t) => {
  const bare = chatSectionTokens({ messages: [{ role: 'user', content: '' }] });
  t.ok(bare >= 3 + 3 + 1, `one empty message: at least OpenAI's 3 priming, 3 per message and the role (${bare})`);
  t.ok(chatSectionTokens({ messages: Array.from({ length: 1_000 }, () => ({ role: 'user', content: '' })) }) >= 3 + 1_000 * 4);
  const id = 'call_'.padEnd(400, 'x');
  t.ok(chatSectionTokens({ messages: [{ role: 'user', name: 'n'.repeat(400), content: '' }] }) >= bare + 100, 'a name');
  t.ok(chatSectionTokens({ messages: [{ role: 'tool', tool_call_id: id, content: '' }] }) >= bare + 100, 'a tool_call_id');
  const call = { id, type: 'function', function: { name: 'f'.repeat(400), arguments: '{}' } };
  t.ok(chatSectionTokens({ messages: [{ role: 'assistant', content: null, tool_calls: [call] }] }) >= bare + 200, 'a tool call id and name');
});

t.test('an Anthropic request of thousands of content blocks reserves markup for every message and block', async (t) => {
  // 1 µ per input token and nothing for output: the reservation is the prompt estimate.
  const priced = await startPricedClaudeNode(t);
  const MESSAGES = 2_000;
  const record = await claudeRequestRecord(
    t,
    priced,
    Array.from({ length: MESSAGES }, (_, i) => ({ role: i % 2 === 0 ? 'user' : 'assistant', content: [{ type: 'text', text: 'x' }, { type: 'text', text: 'y' }] })),
  );
  // Text: 2 tokens per message. Besides: a frame and the role per message, markup per block.
  t.ok(record.cost.reservedMicros >= MESSAGES * (2 + 3 + 1 + 2 * 2), `reserved ${record.cost.reservedMicros} µ for ${MESSAGES} messages of two one-letter blocks`);
  const toolUse = { type: 'tool_use', id: 'toolu_'.padEnd(400, 'x'), name: 'n'.repeat(400), input: {} };
  const plain = messagesSectionTokens({ messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'n', input: {} }] }] });
  t.ok(messagesSectionTokens({ messages: [{ role: 'assistant', content: [toolUse] }] }) >= plain + 150, 'a tool_use block\'s id and name');
  const result = { type: 'tool_result', tool_use_id: 'toolu_'.padEnd(400, 'x'), content: 'ok' };
  t.ok(messagesSectionTokens({ messages: [{ role: 'user', content: [result] }] }) >= plain + 75, 'a tool_result\'s tool_use_id');
});
