// The dev stack's clearly labelled demo upstream: a tiny OpenAI-compatible server that echoes the
// caller's last message, so the gateway can be tried (and tested) without a real model provider.
// Deterministic by design; its behaviour knobs (latency, failures, dropped streams) exist for tests.
import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';

export interface DemoUpstreamBehaviour {
  /** Delay before the first byte of every response. */
  latencyMs?: number;
  /** Delay between streamed chunks. */
  chunkDelayMs?: number;
  /** Answer the next `count` requests with `status` and an OpenAI-style error body (or `body`). */
  failNext?: { count: number; status: number; body?: unknown };
  /** Destroy the socket after this many SSE events of a streamed reply. */
  dropStreamAfterChunks?: number;
  /** Leave `usage` out of replies (also the final usage chunk of a stream). */
  omitUsage?: boolean;
  /** Never answer: hold every request open until the client gives up (timeouts). */
  hang?: boolean;
  /** Reset the connection of the next `count` requests without answering (connection failures). */
  resetNext?: number;
}

export interface RecordedRequest {
  method: string;
  path: string;
  /** As received, so tests can check what a gateway forwarded; never logged. */
  headers: http.IncomingHttpHeaders;
  body: unknown;
}

export interface DemoUpstream {
  server: http.Server;
  /** The most recent requests (up to 1000), oldest first. */
  requests: RecordedRequest[];
  /** Requests whose client went away before the answer was complete (aborted by the caller). */
  abortedCount(): number;
  setBehaviour(b: DemoUpstreamBehaviour): void;
  listen(port?: number, host?: string): Promise<{ url: string; port: number }>;
  close(): Promise<void>;
}

export const DEMO_CHAT_MODEL = 'demo-echo';
export const DEMO_EMBEDDING_MODEL = 'demo-embed';
export const DEMO_REPLY_PREFIX = '[zenova demo upstream] echo: ';
export const DEMO_EMBEDDING_DIMENSIONS = 8;
const MAX_BODY_BYTES = 4 * 1024 * 1024;
const MAX_RECORDED_REQUESTS = 1_000;
const MODEL_CREATED = 1_700_000_000; // fixed, so /v1/models is deterministic

// ---- request schemas (only what the demo reads; everything else passes through untouched) ----

const textPart = z.looseObject({ type: z.string(), text: z.string().optional() });
const messageSchema = z.looseObject({
  role: z.string().min(1),
  content: z.union([z.string(), z.array(textPart), z.null()]).optional(),
});
const chatRequestSchema = z.looseObject({
  model: z.string().min(1),
  messages: z.array(messageSchema).min(1),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().nullish() }).nullish(),
});
const embeddingsRequestSchema = z.looseObject({
  model: z.string().min(1),
  input: z.union([
    z.string(),
    z.array(z.string()).min(1),
    z.array(z.number().int()).min(1),
    z.array(z.array(z.number().int()).min(1)).min(1),
  ]),
  encoding_format: z.enum(['float', 'base64']).nullish(),
});

type ChatMessage = z.infer<typeof messageSchema>;

// ---- deterministic helpers ----

/** A stand-in tokenizer: one token per four characters, at least one. */
export function demoTokenCount(text: string): number {
  return Math.max(1, Math.ceil(text.length / 4));
}

function messageText(message: ChatMessage): string {
  const { content } = message;
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((part) => part.text ?? '').join('');
  return '';
}

/** Splits on word boundaries, keeping the spaces, so the chunks join back into the reply. */
function splitIntoChunks(text: string): string[] {
  return text.match(/\S+\s*|\s+/g) ?? [text];
}

function embeddingOf(input: string): number[] {
  const digest = createHash('sha256').update(input).digest();
  return Array.from({ length: DEMO_EMBEDDING_DIMENSIONS }, (_, i) => Number(((digest.readUInt16BE(i * 2) / 65535) * 2 - 1).toFixed(6)));
}

function base64Floats(values: number[]): string {
  const buffer = Buffer.alloc(values.length * 4);
  values.forEach((v, i) => buffer.writeFloatLE(v, i * 4));
  return buffer.toString('base64');
}

function openAiError(message: string, type: string, code: string | null): { error: { message: string; type: string; code: string | null } } {
  return { error: { message, type, code } };
}

function statusErrorType(status: number): string {
  if (status === 429) return 'rate_limit_error';
  if (status === 401) return 'authentication_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

// ---- the server ----

export function createDemoUpstream(opts?: { behaviour?: DemoUpstreamBehaviour; logRequests?: boolean }): DemoUpstream {
  let behaviour: DemoUpstreamBehaviour = { ...opts?.behaviour };
  const requests: RecordedRequest[] = [];
  let sequence = 0;
  let aborted = 0;
  // Resets the demo does itself are not the client's aborts.
  const resetting = new WeakSet<http.ServerResponse>();

  const sendJson = (res: http.ServerResponse, status: number, body: unknown): void => {
    const payload = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
    res.end(payload);
  };

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const method = req.method ?? 'GET';
    res.setHeader('x-zenova-demo-upstream', '1');
    const aborted = new AbortController();
    res.on('close', () => aborted.abort());

    const raw = await readBody(req);
    let body: unknown = undefined;
    let bodyError: string | undefined;
    if (raw === 'too-large') bodyError = `request body exceeds ${MAX_BODY_BYTES} bytes`;
    else if (raw.length > 0) {
      try {
        body = JSON.parse(raw.toString('utf8'));
      } catch {
        bodyError = 'request body is not valid JSON';
      }
    }
    requests.push({ method, path, headers: { ...req.headers }, body });
    // A long-running dev stack must not grow without bound; tests never come near the cap.
    if (requests.length > MAX_RECORDED_REQUESTS) requests.splice(0, requests.length - MAX_RECORDED_REQUESTS);

    if (behaviour.resetNext) {
      behaviour = { ...behaviour, resetNext: behaviour.resetNext - 1 };
      resetting.add(res);
      res.socket?.resetAndDestroy();
      return;
    }
    if (behaviour.hang) {
      await new Promise((resolve) => aborted.signal.addEventListener('abort', resolve, { once: true }));
      return;
    }
    if (behaviour.latencyMs) await sleep(behaviour.latencyMs, undefined, { signal: aborted.signal }).catch(() => undefined);
    if (aborted.signal.aborted) return;

    const failure = behaviour.failNext;
    if (failure && failure.count > 0) {
      behaviour = { ...behaviour, failNext: failure.count > 1 ? { ...failure, count: failure.count - 1 } : undefined };
      sendJson(res, failure.status, failure.body ?? openAiError(`demo upstream failure (status ${failure.status}, as configured)`, statusErrorType(failure.status), 'demo_upstream_failure'));
      return;
    }
    if (bodyError) {
      sendJson(res, raw === 'too-large' ? 413 : 400, openAiError(bodyError, 'invalid_request_error', null));
      return;
    }

    if (method === 'GET' && path === '/v1/models') {
      sendJson(res, 200, {
        object: 'list',
        data: [DEMO_CHAT_MODEL, DEMO_EMBEDDING_MODEL].map((id) => ({ id, object: 'model', created: MODEL_CREATED, owned_by: 'zenova-demo' })),
      });
      return;
    }
    if (method === 'POST' && path === '/v1/chat/completions') {
      await chatCompletions(body, res, aborted.signal);
      return;
    }
    if (method === 'POST' && path === '/v1/embeddings') {
      embeddings(body, res);
      return;
    }
    sendJson(res, 404, openAiError(`demo upstream has no route ${method} ${path}`, 'invalid_request_error', 'unknown_url'));
  };

  const chatCompletions = async (body: unknown, res: http.ServerResponse, signal: AbortSignal): Promise<void> => {
    const parsed = chatRequestSchema.safeParse(body);
    if (!parsed.success) {
      sendJson(res, 400, openAiError(`invalid chat completion request: ${z.prettifyError(parsed.error)}`, 'invalid_request_error', 'invalid_request'));
      return;
    }
    const request = parsed.data;
    const lastUser = [...request.messages].reverse().find((m) => m.role === 'user');
    const content = DEMO_REPLY_PREFIX + (lastUser ? messageText(lastUser) : '');
    const promptTokens = demoTokenCount(request.messages.map(messageText).join(''));
    const completionTokens = demoTokenCount(content);
    const usage = { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
    const id = `chatcmpl-demo-${++sequence}`;
    const created = Math.floor(Date.now() / 1000);

    if (!request.stream) {
      sendJson(res, 200, {
        id, object: 'chat.completion', created, model: request.model,
        choices: [{ index: 0, message: { role: 'assistant', content, refusal: null }, logprobs: null, finish_reason: 'stop' }],
        ...(behaviour.omitUsage ? {} : { usage }),
      });
      return;
    }

    const includeUsage = request.stream_options?.include_usage === true;
    const chunk = (delta: Record<string, unknown>, finishReason: string | null): Record<string, unknown> => ({
      id, object: 'chat.completion.chunk', created, model: request.model,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
      ...(includeUsage ? { usage: null } : {}),
    });
    const events: unknown[] = [
      chunk({ role: 'assistant', content: '' }, null),
      ...splitIntoChunks(content).map((piece) => chunk({ content: piece }, null)),
      chunk({}, 'stop'),
    ];
    if (includeUsage && !behaviour.omitUsage) {
      events.push({ id, object: 'chat.completion.chunk', created, model: request.model, choices: [], usage });
    }

    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    const { chunkDelayMs, dropStreamAfterChunks } = behaviour;
    let sent = 0;
    for (const event of events) {
      if (dropStreamAfterChunks !== undefined && sent >= dropStreamAfterChunks) {
        resetting.add(res);
        res.socket?.destroy(); // a broken upstream: no finish, no [DONE]
        return;
      }
      if (sent > 0 && chunkDelayMs) await sleep(chunkDelayMs, undefined, { signal }).catch(() => undefined);
      if (signal.aborted) return;
      // Wait for each event to reach the socket: a dropped stream must drop after, not before, it.
      await new Promise<void>((resolve) => {
        const done = (): void => {
          signal.removeEventListener('abort', done);
          resolve();
        };
        signal.addEventListener('abort', done);
        res.write(`data: ${JSON.stringify(event)}\n\n`, done);
      });
      sent++;
    }
    res.end('data: [DONE]\n\n');
  };

  const embeddings = (body: unknown, res: http.ServerResponse): void => {
    const parsed = embeddingsRequestSchema.safeParse(body);
    if (!parsed.success) {
      sendJson(res, 400, openAiError(`invalid embeddings request: ${z.prettifyError(parsed.error)}`, 'invalid_request_error', 'invalid_request'));
      return;
    }
    const { input, model, encoding_format: format } = parsed.data;
    // Token-id inputs are embedded by their textual form; good enough for a demo.
    const texts: string[] = typeof input === 'string' ? [input]
      : input.every((v) => typeof v === 'string') ? input
      : input.every((v) => typeof v === 'number') ? [input.join(',')]
      : input.map((v) => (Array.isArray(v) ? v.join(',') : String(v)));
    const promptTokens = texts.reduce((sum, text) => sum + demoTokenCount(text), 0);
    sendJson(res, 200, {
      object: 'list',
      model,
      data: texts.map((text, index) => {
        const vector = embeddingOf(text);
        return { object: 'embedding', index, embedding: format === 'base64' ? base64Floats(vector) : vector };
      }),
      ...(behaviour.omitUsage ? {} : { usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } }),
    });
  };

  const server = http.createServer((req, res) => {
    const started = Date.now();
    // Counted once the request was read: the client left before the answer was complete.
    res.on('close', () => {
      if (!res.writableFinished && !resetting.has(res)) aborted++;
    });
    if (opts?.logRequests) {
      // Method, path and status only: headers carry the caller's upstream credentials.
      res.on('finish', () => console.log(JSON.stringify({ msg: 'demo upstream request', method: req.method, path: (req.url ?? '').split('?')[0], status: res.statusCode, ms: Date.now() - started })));
    }
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) sendJson(res, 500, openAiError('demo upstream internal error', 'server_error', null));
      else res.destroy();
      if (opts?.logRequests) console.error(JSON.stringify({ msg: 'demo upstream error', err: err instanceof Error ? err.message : String(err) }));
    });
  });

  return {
    server,
    requests,
    abortedCount: () => aborted,
    setBehaviour(b) { behaviour = { ...b }; },
    listen(port = 0, host = '127.0.0.1') {
      return new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          const address = server.address() as AddressInfo;
          // A wildcard bind is reached through loopback.
          const reachable = address.address === '0.0.0.0' || address.address === '::' ? '127.0.0.1' : address.address;
          const urlHost = reachable.includes(':') ? `[${reachable}]` : reachable;
          resolve({ url: `http://${urlHost}:${address.port}/v1`, port: address.port });
        });
      });
    },
    close() {
      return new Promise((resolve, reject) => {
        if (!server.listening) { resolve(); return; }
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections(); // keep-alive clients would otherwise hold close() open
      });
    },
  };
}

/** Reads the whole body, or reports it too large (draining the rest so the reply can be sent). */
function readBody(req: http.IncomingMessage): Promise<Buffer | 'too-large'> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) tooLarge = true;
      if (!tooLarge) chunks.push(chunk);
    });
    req.on('end', () => resolve(tooLarge ? 'too-large' : Buffer.concat(chunks)));
    req.on('error', reject);
  });
}
