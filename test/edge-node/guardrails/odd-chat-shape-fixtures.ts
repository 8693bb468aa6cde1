// What the tests of OpenAI chat messages in shapes the node did not read (odd tool calls, unread
// items, parts and field values) share: the answers and stream chunks the scripted upstream serves,
// a chat request sent raw with what the upstream was sent and what the caller got, a flag rule's
// match count read from the record of a request, and the checks they each run over their list of
// odd shapes (refused or blocked under rules, as they came without).
import type { Test } from 'tap';
import type { RequestRecord } from '../../../proto/src/index.js';
import type { RequestSpool } from '../../../edge-node/src/spool/request-spool.js';
import type { GuardedNode } from './guarded-node.js';
import { rawChatStream } from './guarded-node.js';
import { sseData } from './scripted-upstream.js';

/** The one user message these tests send. */
export const USER_GO = [{ role: 'user' as const, content: 'go' }];
/** The event that ends an OpenAI chat stream. */
export const SSE_DONE = 'data: [DONE]\n\n';

/**
 * A scripted JSON answer: a chat completion whose one choice's message is `message` (an assistant's,
 * content null unless it says), ended with `finishReason`.
 */
export function chatAnswerWith(message: Record<string, unknown>, finishReason = 'stop'): { json: unknown } {
  return {
    json: {
      id: 'chatcmpl-1',
      object: 'chat.completion',
      created: 1,
      model: 'demo-echo',
      choices: [{ index: 0, message: { role: 'assistant', content: null, ...message }, finish_reason: finishReason }],
      usage: { prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 },
    },
  };
}

/** A chat completion chunk with `delta` (and `finish`), as one SSE event. */
export const chatChunkEvent = (delta: Record<string, unknown>, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'echo', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

/** A chat completion of model `echo` with `body` under key `secret`, read raw. */
export async function postChat(node: { baseURL: string }, secret: string, body: Record<string, unknown>): Promise<{ status: number; text: string; requestId: string | null }> {
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
    body: JSON.stringify({ model: 'echo', ...body }),
  });
  return { status: res.status, text: await res.text(), requestId: res.headers.get('x-request-id') };
}

/** The messages the upstream last received. */
export function forwardedMessages(upstream: { requests: Array<{ body: unknown }> }): Array<Record<string, unknown>> {
  return (upstream.requests.at(-1)!.body as { messages: Array<Record<string, unknown>> }).messages;
}

/** The message of a chat completion's first choice, out of its JSON text. */
export function answerMessage(text: string): Record<string, unknown> {
  return (JSON.parse(text) as { choices: Array<{ message: Record<string, unknown> }> }).choices[0]!.message;
}

/**
 * A spool that keeps every record (bodies too), and `matches`: how many matches the guardrail
 * verdict on `on` counted in the record of `requestId`, once that record is written (5 s at most).
 */
export function recordedGuardrailMatches(): {
  spool: RequestSpool;
  matches: (requestId: string | null, on: 'input' | 'output') => Promise<number | undefined>;
} {
  const records: RequestRecord[] = [];
  const spool: RequestSpool = { open: () => undefined, finalise: async (record) => void records.push(record), keepsBodies: () => true, fullness: () => 0 };
  const matches = async (requestId: string | null, on: 'input' | 'output'): Promise<number | undefined> => {
    const deadline = Date.now() + 5_000;
    let record: RequestRecord | undefined;
    while ((record = records.find((r) => r.requestId === requestId)) === undefined) {
      if (Date.now() > deadline) throw new Error(`no record of ${String(requestId)}`);
      await new Promise((resolve) => setImmediate(resolve));
    }
    return record.guardrails.find((verdict) => verdict.on === on)?.matches;
  };
  return { spool, matches };
}

/** How a test sends a chat completion (postChat, or postChat with more fields). */
export type ChatPost = typeof postChat;

/**
 * Under input rules blocking `aurora`: each request with `messageOf(fields)` after USER_GO is
 * refused with ZN_ERR_GUARDRAIL_BLOCKED, `aurora` not echoed, before the upstream is called.
 */
export async function checkOddRequestsRefusedBeforeTheUpstream(t: Test, { upstream, node }: GuardedNode, oddFields: Array<Record<string, unknown>>, messageOf: (fields: Record<string, unknown>) => Record<string, unknown>, post: ChatPost = postChat): Promise<void> {
  for (const fields of oddFields) {
    const sent = upstream.requests.length;
    const res = await post(node, node.secret, { messages: [...USER_GO, messageOf(fields)] });
    t.equal(res.status, 400, JSON.stringify(fields));
    t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(res.text, /aurora/);
    t.equal(upstream.requests.length, sent, 'the upstream was never called');
  }
}

/** Under the key without rules: each request with `messageOf(fields)` after USER_GO is taken and forwarded as it came. */
export async function checkOddRequestsForwardedWithoutRules(t: Test, { upstream, node, plainSecret }: GuardedNode, oddFields: Array<Record<string, unknown>>, messageOf: (fields: Record<string, unknown>) => Record<string, unknown>, post: ChatPost = postChat): Promise<void> {
  for (const fields of oddFields) {
    const odd = [...USER_GO, messageOf(fields)];
    t.equal((await post(node, plainSecret, { messages: odd })).status, 200, 'the schema takes the shape');
    t.same(forwardedMessages(upstream), odd, 'without input rules it is forwarded as it came');
  }
}

/**
 * Under output rules blocking `aurora`: a JSON answer with each message is blocked, `aurora` not
 * sent; under the key without rules it goes out as it came.
 */
export async function checkOddAnswersBlockedUnderOutputRules(t: Test, { upstream, node, plainSecret }: GuardedNode, oddMessages: Array<Record<string, unknown>>, post: ChatPost = postChat): Promise<void> {
  for (const message of oddMessages) {
    upstream.answer = chatAnswerWith(message);
    const res = await post(node, node.secret, { messages: USER_GO });
    t.equal(res.status, 400, JSON.stringify(message));
    t.match(res.text, /ZN_ERR_GUARDRAIL_BLOCKED/);
    t.notMatch(res.text, /aurora/);

    upstream.answer = chatAnswerWith(message);
    const plain = await post(node, plainSecret, { messages: USER_GO });
    t.equal(plain.status, 200, 'without output rules it passes');
    t.same(answerMessage(plain.text), { role: 'assistant', content: null, ...message });
  }
}

/**
 * Under output rules: a stream whose second chunk carries `delta` (then a `finish` chunk and
 * [DONE]) started, then ended with the guardrail error event, nothing matching `hidden` sent
 * (`hiddenWhat` names it); under the key without rules every event goes out as it came.
 */
export async function checkStreamedDeltaEndsTheStream(
  t: Test,
  { upstream, node, plainSecret }: GuardedNode,
  ask: Record<string, unknown>,
  delta: Record<string, unknown>,
  opts: { finish: string; label: string; hidden: RegExp; hiddenWhat: string },
): Promise<void> {
  const sse = [chatChunkEvent({ role: 'assistant', content: 'Looking.' }), chatChunkEvent(delta), chatChunkEvent({}, opts.finish), SSE_DONE];
  upstream.answer = { sse };
  const { status, body } = await rawChatStream(node, node.secret, ask);
  t.equal(status, 200, 'the stream had started');
  t.match(sseData(body).at(-1), /ZN_ERR_GUARDRAIL_BLOCKED/, `${opts.label}: ended with the guardrail error event`);
  t.notMatch(body, opts.hidden, opts.hiddenWhat);
  t.notMatch(body, /\[DONE\]/);

  upstream.answer = { sse };
  const plain = await rawChatStream(node, plainSecret, ask);
  t.same(sseData(plain.body), sse.map((event) => event.slice('data: '.length, -2)), 'without output rules: as it came');
}

/**
 * Under a flag rule on e-mail addresses: each message, in a JSON answer and then (as
 * `messageOf(message)` after USER_GO) in a request, is taken and its verdict counts one match.
 */
export async function checkFlagCountsOnceInAnswersAndRequests(
  t: Test,
  { upstream, node }: Pick<GuardedNode, 'upstream' | 'node'>,
  matches: ReturnType<typeof recordedGuardrailMatches>['matches'],
  messages: Array<Record<string, unknown>>,
  messageOf: (message: Record<string, unknown>) => Record<string, unknown>,
  post: ChatPost = postChat,
): Promise<void> {
  for (const message of messages) {
    upstream.answer = chatAnswerWith(message);
    const res = await post(node, node.secret, { messages: USER_GO });
    t.equal(res.status, 200);
    t.equal(await matches(res.requestId, 'output'), 1, `answer: ${JSON.stringify(message)}`);
  }
  upstream.answer = chatAnswerWith({ content: 'ok' });
  for (const message of messages) {
    const res = await post(node, node.secret, { messages: [...USER_GO, messageOf(message)] });
    t.equal(res.status, 200);
    t.equal(await matches(res.requestId, 'input'), 1, `request: ${JSON.stringify(message)}`);
  }
}
