// An Anthropic stream event is read as written: an integer past 2^53 (a compatible upstream's tool
// input carrying a 19-digit card as a JSON number) is checked as its digits, not as the double
// JSON.parse rounds it to while the event's bytes went on unchanged. Masked, it goes out as the
// placeholder; matching nothing, the event goes out byte for byte, the number digit for digit.
import t from 'tap';
import { startGuardedNode } from './guarded-node.js';

const CARD_19 = '4111111111111111110';
const NOT_A_CARD = '9007199254740993';
const ev = (type: string, data: string): string => `event: ${type}\ndata: ${data}\n\n`;
const stream = (input: string): string[] => [
  ev('message_start', '{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"claude-real","content":[],"usage":{"input_tokens":5,"output_tokens":1}}}'),
  ev('content_block_start', `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"pay","input":${input}}}`),
  ev('content_block_stop', '{"type":"content_block_stop","index":0}'),
  ev('message_delta', '{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}'),
  ev('message_stop', '{"type":"message_stop"}'),
];

t.test('a 19-digit card as a JSON number in a streamed tool input is masked under an output mask rule; an unmatched long integer goes out as sent', async (t) => {
  const { upstream, node } = await startGuardedNode(t, [{ detector: 'bank-card', action: 'mask', on: 'output' }]);
  const ask = async (): Promise<string> => {
    const res = await fetch(`${node.baseURL}/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'claude', max_tokens: 10, stream: true, messages: [{ role: 'user', content: 'pay' }] }),
    });
    return res.text();
  };
  upstream.answer = { sse: stream(`{"card":${CARD_19}}`) };
  const masked = await ask();
  t.notMatch(masked, CARD_19, 'the card never reaches the caller');
  t.notMatch(masked, '4111111111111111', 'nor its leading digits, rounded');
  t.match(masked, /"input":\{"card":"\[BANK_CARD\]"\}/);

  const plain = `{"id":${NOT_A_CARD},"note":"x"}`;
  upstream.answer = { sse: stream(plain) };
  t.match(await ask(), `"input":${plain}`, 'byte for byte');
});
