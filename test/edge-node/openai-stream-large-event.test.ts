// One streamed event may be as large as a JSON answer (32 MiB): an inline base64 image in a chat
// delta (as OpenAI-compatible aggregators send for image-output models) passes in a stream as it
// does in the JSON answer. Before, an event over 1 MiB ended the stream with ZN_ERR_UPSTREAM_ERROR.
import t from 'tap';
import { json, sse, startScriptedUpstreamNode } from './billing/scripted-upstream-node.js';

const image = `data:image/png;base64,${Buffer.alloc(900 * 1024, 7).toString('base64')}`; // ≈1.2 MB
const base = { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo' };
const usage = { prompt_tokens: 5, completion_tokens: 1300, total_tokens: 1305 };
const request = { model: 'echo', messages: [{ role: 'user', content: 'draw a cat' }] };

t.test('a chat stream with an event over 1 MiB is delivered, as the same answer in JSON is', async (t) => {
  const node = await startScriptedUpstreamNode(t);

  node.answer(json({
    id: 'c1', object: 'chat.completion', created: 1, model: 'demo-echo',
    choices: [{ index: 0, message: { role: 'assistant', content: 'Here is your image', images: [{ type: 'image_url', image_url: { url: image } }] }, finish_reason: 'stop' }],
    usage,
  }));
  const asJson = await node.post('/v1/chat/completions', request);
  t.equal(asJson.status, 200, 'the JSON answer is delivered');
  t.ok(asJson.text.includes(image));

  node.answer(sse([
    { data: { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: 'Here is your image' }, finish_reason: null }] } },
    { data: { ...base, choices: [{ index: 0, delta: { images: [{ type: 'image_url', image_url: { url: image } }] }, finish_reason: null }] } },
    { data: { ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] } },
    { data: { ...base, choices: [], usage } },
    { data: '[DONE]' },
  ]));
  const streamed = await node.post('/v1/chat/completions', { ...request, stream: true });
  t.equal(streamed.status, 200);
  const events = streamed.text.split('\n\n').filter((e) => e !== '').map((e) => e.replace(/^data: /, ''));
  t.equal(events.at(-1), '[DONE]', 'the stream ends properly');
  t.notOk(events.some((e) => e.includes('ZN_ERR_UPSTREAM_ERROR')), 'no error event');
  const imageEvent = events.map((e) => (e === '[DONE]' ? undefined : (JSON.parse(e) as { choices: Array<{ delta: { images?: Array<{ image_url: { url: string } }> } }> })))
    .find((chunk) => chunk?.choices[0]?.delta.images !== undefined);
  t.equal(imageEvent?.choices[0]?.delta.images?.[0]?.image_url.url, image, 'the image arrives whole');
  t.match(streamed.record, { status: 'ok', httpStatus: 200, errorCode: null });
  t.same(streamed.record.usage, { inputTokens: 5, outputTokens: 1300, estimated: false }, "the upstream's final usage, as for the JSON answer");
});
