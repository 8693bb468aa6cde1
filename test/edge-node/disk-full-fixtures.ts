// What the full-disk pipeline tests share (node-stop-disk-full, pipeline/caller-left-disk-full):
// answers to a prompt too large to record on a full disk, and an upstream that holds each answer
// until released, so the requests' open rows commit before the disk is filled.
import http from 'node:http';
import type { Test } from 'tap';
import { listenForTest } from '../fixtures/loopback-server.js';

/** A prompt large enough that its record cannot be written on the full disk. */
export const PROMPT = 'x '.repeat(50_000);
const USAGE = { prompt_tokens: 40, completion_tokens: 2, total_tokens: 42 };
const COMPLETION = { id: 'c1', object: 'chat.completion', created: 1, model: 'demo-echo', choices: [{ index: 0, message: { role: 'assistant', content: 'Hi there' }, finish_reason: 'stop' }], usage: USAGE };
const CHUNK = { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'demo-echo' };
const STREAM =
  `data: ${JSON.stringify({ ...CHUNK, choices: [{ index: 0, delta: { role: 'assistant', content: 'Hi there' }, finish_reason: null }] })}\n\n` +
  `data: ${JSON.stringify({ ...CHUNK, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n` +
  `data: ${JSON.stringify({ ...CHUNK, choices: [], usage: USAGE })}\n\n` +
  'data: [DONE]\n\n';

/** An upstream that reads each request and answers only once released (so the open rows commit before the disk is filled). */
export async function gatedUpstream(t: Test): Promise<{ url: string; received: () => number; release: () => void }> {
  const held: Array<() => void> = [];
  let released = false;
  let received = 0;
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      received += 1;
      const stream = (JSON.parse(body) as { stream?: boolean }).stream === true;
      const answer = (): void => {
        if (stream) res.writeHead(200, { 'content-type': 'text/event-stream' }).end(STREAM);
        else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(COMPLETION));
      };
      if (released) answer();
      else held.push(answer);
    });
  });
  const url = await listenForTest(t, server);
  return {
    url,
    received: () => received,
    release: () => {
      released = true;
      for (const answer of held.splice(0)) answer();
    },
  };
}
