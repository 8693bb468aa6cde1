// A JSON answer (chat or messages, not streamed) is read as written: an integer past 2^53 in it
// (a 64-bit id, a compatible upstream's tool input carrying a 19-digit card as a JSON number) goes
// to the caller digit for digit, not as the double JSON.parse rounds it to, and output rules check
// its digits: a mask rule replaces it with the placeholder.
import t from 'tap';
import { startGuardedNode } from './guarded-node.js';

const CARD_19 = '4111111111111111110';
const NOT_A_CARD = '9007199254740993';

const messagesAnswer = (input: string): string =>
  `{"id":"m","type":"message","role":"assistant","model":"claude-real","content":[{"type":"tool_use","id":"t1","name":"pay","input":${input}}],"stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":9}}`;

t.test('a messages answer: a long integer in a tool input is masked under an output mask rule, and an unmatched one goes out as sent', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, [{ detector: 'bank-card', action: 'mask', on: 'output' }]);
  const ask = async (secret: string): Promise<string> => {
    const res = await fetch(`${node.baseURL}/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': secret, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'claude', max_tokens: 10, messages: [{ role: 'user', content: 'pay' }] }),
    });
    t.equal(res.status, 200);
    return res.text();
  };
  upstream.answer = { jsonText: messagesAnswer(`{"card":${CARD_19}}`) };
  const masked = await ask(node.secret);
  t.notMatch(masked, CARD_19, 'the card never reaches the caller');
  t.notMatch(masked, '4111111111111111', 'nor its leading digits, rounded');
  t.match(masked, /"input":\{"card":"\[BANK_CARD\]"\}/);

  const plain = `{"id":${NOT_A_CARD},"note":"x"}`;
  upstream.answer = { jsonText: messagesAnswer(plain) };
  t.match(await ask(node.secret), `"input":${plain}`, 'digit for digit, under a policy');
  t.match(await ask(plainSecret), `"input":${plain}`, 'digit for digit, without one');
});

t.test('a chat answer: a long integer the node does not read goes to the caller digit for digit', async (t) => {
  const { upstream, node, plainSecret } = await startGuardedNode(t, [{ detector: 'bank-card', action: 'mask', on: 'output' }]);
  upstream.answer = {
    jsonText: `{"id":"c","object":"chat.completion","created":1,"model":"m","trace":${NOT_A_CARD},"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`,
  };
  for (const secret of [node.secret, plainSecret]) {
    const res = await fetch(`${node.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
      body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }),
    });
    t.equal(res.status, 200);
    const text = await res.text();
    t.match(text, `"trace":${NOT_A_CARD}`);
    t.match(text, '"content":"ok"');
  }
});
