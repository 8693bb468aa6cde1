// An HTTP upstream on 127.0.0.1:0 that answers every request with the answer a test set last
// (a JSON body, a JSON text written as given, or SSE events written as given) and records each request's path and parsed body:
// for answers the demo upstreams do not produce (tool calls, reasoning, thinking).
import http from 'node:http';
import { listenForTest } from '../../fixtures/loopback-server.js';

export type ScriptedAnswer = { json: unknown } | { jsonText: string } | { sse: string[] };

export interface ScriptedUpstream {
  /** Base URL ending in /v1. */
  url: string;
  /** Each request's path, parsed body and body text as sent. */
  requests: Array<{ path: string; body: unknown; text: string }>;
  answer: ScriptedAnswer;
}

export async function startScriptedUpstream(t: { teardown(fn: () => unknown): void }): Promise<ScriptedUpstream> {
  const state: ScriptedUpstream = { url: '', requests: [], answer: { json: {} } };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      state.requests.push({ path: req.url ?? '', body: JSON.parse(text) as unknown, text });
      const answer = state.answer;
      if ('json' in answer) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(answer.json));
        return;
      }
      if ('jsonText' in answer) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(answer.jsonText);
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const event of answer.sse) res.write(event);
      res.end();
    });
  });
  state.url = await listenForTest(t, server);
  return state;
}

/** The `data:` payloads of an SSE body, in order. */
export function sseData(body: string): string[] {
  return body.split('\n\n').flatMap((block) => block.split('\n').filter((line) => line.startsWith('data: ')).map((line) => line.slice('data: '.length)));
}
