// The credit reservation of an Anthropic request whose history holds a tool call: the tool_use
// input is billed as the JSON the upstream reads, so a caller cannot hide hundreds of KB of input
// in numbers (or true, false, null), which the estimate once skipped, and reserve almost nothing.
import t from 'tap';
import { claudeRequestRecord, startPricedClaudeNode } from './priced-claude-node.js';

t.test('a tool_use input of numbers reserves credit for its JSON length, and a small one only a little', async (t) => {
  // 1 µ per input token and nothing for output: the reservation is the prompt estimate.
  const priced = await startPricedClaudeNode(t);

  /** The micro-units reserved for a request whose assistant turn called a tool with `input`. */
  const reservedFor = async (input: unknown): Promise<number> => {
    const record = await claudeRequestRecord(t, priced, [
      { role: 'user', content: 'go' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'f', input }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'ok' }] },
    ]);
    return record.cost.reservedMicros;
  };

  const big = { data: new Array<number>(200_000).fill(0) };
  const bigJson = JSON.stringify(big).length;
  const reservedBig = await reservedFor(big);
  t.ok(reservedBig >= bigJson / 4, `400 KB of zeros reserved ${reservedBig} µ: at least a token per 4 of its ${bigJson} characters`);
  t.ok(reservedBig <= bigJson / 4 + 100, `and about that (the rest is the messages' few words): ${reservedBig} µ`);

  const half = { data: new Array<number>(100_000).fill(0) };
  const reservedHalf = await reservedFor(half);
  t.ok(Math.abs(reservedHalf - reservedBig / 2) <= 100, `half the zeros reserve half as much: ${reservedHalf} µ against ${reservedBig} µ`);

  const reservedSmall = await reservedFor({ data: [0, 1, 2] });
  // About 35 of them are the template's tokens of the three messages and two blocks (prompt-sections.ts), counted since; the input is a few.
  t.ok(reservedSmall <= 50, `a small input reserves a few tokens: ${reservedSmall} µ`);
  t.equal(priced.upstream.requests.length, 3, 'each request was forwarded');
});
