/**
 * The admin API client: bearer token, TLS verified against ZENOVA_CA_FILE or the default trust
 * store, JSON bodies read with a size limit and checked with zod. Failures come out as one of three
 * errors: ApiError (the API said no: its code and message), ConnectionError (never got an answer),
 * UnexpectedResponseError (an answer that is not the admin API's).
 */
import { Agent, request } from 'undici';
import type { Dispatcher } from 'undici';
import { z } from 'zod';
import { describeConnectionFailure } from './connection-errors.js';
import type { ConnectionSettings } from './connection-settings.js';

const CONNECT_TIMEOUT_MS = 10_000;
const ANSWER_TIMEOUT_MS = 30_000;
const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
const MAX_MESSAGE_CHARS = 1_000;

export type HttpMethod = 'GET' | 'POST' | 'PATCH' | 'DELETE';

export class ApiError extends Error {
  readonly code: string;
  readonly status: number;
  constructor(code: string, message: string, status: number) {
    super(message);
    this.name = 'ApiError';
    this.code = code;
    this.status = status;
  }
}

export class ConnectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ConnectionError';
  }
}

export class UnexpectedResponseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UnexpectedResponseError';
  }
}

const errorBodySchema = z.object({
  error: z.object({ code: z.string().min(1).max(100), message: z.string() }),
});

export interface AdminResponse<T> {
  data: T;
  /** The JSON as the API sent it, for --json (keeps fields this CLI does not know yet). */
  raw: unknown;
}

export interface AdminClient {
  call<S extends z.ZodType>(method: HttpMethod, apiPath: string, schema: S, body?: unknown): Promise<AdminResponse<z.infer<S>>>;
  close(): Promise<void>;
}

async function readLimited(body: Dispatcher.ResponseData['body']): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buf = chunk as Buffer;
    size += buf.length;
    if (size > MAX_RESPONSE_BYTES) {
      body.destroy();
      throw new UnexpectedResponseError(`the answer is larger than ${MAX_RESPONSE_BYTES / (1024 * 1024)} MiB`);
    }
    chunks.push(buf);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function describeIssues(error: z.ZodError): string {
  const issue = error.issues[0];
  if (!issue) return 'it does not have the expected shape';
  const where = issue.path.length > 0 ? issue.path.join('.') : '(body)';
  return `${where}: ${issue.message}`;
}

export function createAdminClient(conn: ConnectionSettings): AdminClient {
  // rejectUnauthorized stated outright, so NODE_TLS_REJECT_UNAUTHORIZED=0 in the shell cannot turn verification off.
  const connect = conn.caPem === undefined
    ? { timeout: CONNECT_TIMEOUT_MS, rejectUnauthorized: true }
    : { timeout: CONNECT_TIMEOUT_MS, rejectUnauthorized: true, ca: conn.caPem };
  const agent = new Agent({ connect, headersTimeout: ANSWER_TIMEOUT_MS, bodyTimeout: ANSWER_TIMEOUT_MS });
  const target = { displayUrl: conn.displayUrl, host: conn.baseUrl.hostname, caFile: conn.caFile };

  const call = async <S extends z.ZodType>(method: HttpMethod, apiPath: string, schema: S, body?: unknown): Promise<AdminResponse<z.infer<S>>> => {
    const url = new URL(apiPath, conn.baseUrl);
    const what = `${method} /${apiPath}`;
    const headers: Record<string, string> = {
      authorization: `Bearer ${conn.adminToken}`,
      accept: 'application/json',
      'user-agent': 'zenova-cli',
    };
    let payload: string | undefined;
    if (body !== undefined) {
      payload = JSON.stringify(body);
      headers['content-type'] = 'application/json';
    }
    let response: Dispatcher.ResponseData;
    let text: string;
    try {
      response = await request(url, { method, headers, body: payload, dispatcher: agent });
      text = await readLimited(response.body);
    } catch (err) {
      if (err instanceof UnexpectedResponseError) throw new UnexpectedResponseError(`unexpected answer from the control plane to ${what}: ${err.message}`);
      throw new ConnectionError(describeConnectionFailure(err, target), { cause: err });
    }
    const json = parseJson(text);
    const status = response.statusCode;
    if (status >= 400) {
      const parsed = errorBodySchema.safeParse(json);
      if (parsed.success) throw new ApiError(parsed.data.error.code, parsed.data.error.message.slice(0, MAX_MESSAGE_CHARS), status);
      throw new UnexpectedResponseError(
        `unexpected answer from ${conn.displayUrl} to ${what}: HTTP ${status} without an admin API error body (is ${conn.displayUrl} the control plane?)`,
      );
    }
    if (json === undefined) {
      throw new UnexpectedResponseError(`unexpected answer from ${conn.displayUrl} to ${what}: HTTP ${status} but not JSON (is ${conn.displayUrl} the control plane?)`);
    }
    const parsed = schema.safeParse(json);
    if (!parsed.success) {
      throw new UnexpectedResponseError(`unexpected answer from the control plane to ${what}: ${describeIssues(parsed.error)} (is this CLI the control plane's version?)`);
    }
    return { data: parsed.data, raw: json };
  };

  return { call, close: () => agent.close() };
}
