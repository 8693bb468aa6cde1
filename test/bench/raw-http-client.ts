/**
 * The load generators' HTTP/1.1 client: one keep-alive socket per connection, the request's bytes
 * built once, and a response parser that only finds the status and the end of the body
 * (Content-Length or chunked). The measuring instrument shares the two cores with what it measures,
 * so it should cost as little as possible: undici's `Pool.request` with `body.text()` cost the
 * generator ≈ 4× the CPU per request of this (`npm run bench:gateway` prints both sides' CPU), and
 * that CPU was taken from the gateway under test. Not a general client: no pipelining, no
 * redirects, no compression, one request in flight per connection.
 */
import { connect } from 'node:net';
import type { Socket } from 'node:net';

/** What one request came back with: the status, and the body only when it was not a 200. */
export interface RawAnswer {
  status: number;
  errorBody?: string;
}

const HEAD_END = Buffer.from('\r\n\r\n');
const CRLF = Buffer.from('\r\n');
const CONTENT_LENGTH = /\r\ncontent-length:[ \t]*(\d+)/i;
const CHUNKED = /\r\ntransfer-encoding:[ \t]*[^\r]*chunked/i;
const CONNECTION_CLOSE = /\r\nconnection:[ \t]*close/i;

/** The bytes of one POST with a JSON body, sent as is on every request. */
export function requestBytes(host: string, path: string, headers: Record<string, string>, body: string): Buffer {
  const bodyBytes = Buffer.from(body, 'utf8');
  let head = `POST ${path} HTTP/1.1\r\nhost: ${host}\r\ncontent-length: ${bodyBytes.length}\r\n`;
  for (const [name, value] of Object.entries(headers)) {
    if (/^(host|content-length|connection|transfer-encoding)$/i.test(name)) continue;
    head += `${name}: ${value}\r\n`;
  }
  return Buffer.concat([Buffer.from(`${head}\r\n`, 'latin1'), bodyBytes]);
}

type Pending = { resolve: (answer: RawAnswer) => void; reject: (err: Error) => void };

/** One keep-alive connection; `send` may be called again once the previous answer has resolved. */
export class RawHttpConnection {
  private socket: Socket | undefined;
  private pending: Pending | undefined;
  private buffered: Buffer = Buffer.alloc(0);
  /** -1 while reading the head; then the body's parse state. */
  private bodyLeft = -1;
  private chunked = false;
  private status = 0;
  private closeAfter = false;
  private errorBody: Buffer[] = [];

  constructor(
    private readonly port: number,
    private readonly host: string,
    private readonly request: Buffer,
    private readonly timeoutMs: number,
  ) {}

  /** Whether an answer is awaited. */
  get busy(): boolean {
    return this.pending !== undefined;
  }

  send(): Promise<RawAnswer> {
    if (this.pending !== undefined) return Promise.reject(new Error('a request is already in flight on this connection'));
    return new Promise<RawAnswer>((resolve, reject) => {
      this.pending = { resolve, reject };
      this.resetParse();
      const socket = this.socket ?? this.open();
      socket.write(this.request);
    });
  }

  close(): void {
    this.socket?.destroy();
    this.socket = undefined;
  }

  private open(): Socket {
    const socket = connect({ port: this.port, host: this.host, noDelay: true });
    socket.setTimeout(this.timeoutMs);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('timeout', () => this.fail(socket, new Error(`no answer within ${this.timeoutMs} ms`)));
    socket.on('error', (err) => this.fail(socket, err));
    socket.on('close', () => this.fail(socket, new Error('the connection closed before the answer ended')));
    this.socket = socket;
    return socket;
  }

  private resetParse(): void {
    this.buffered = Buffer.alloc(0);
    this.bodyLeft = -1;
    this.chunked = false;
    this.status = 0;
    this.closeAfter = false;
    this.errorBody = [];
  }

  private fail(socket: Socket, err: Error): void {
    socket.destroy();
    // A socket closed after its answer (connection: close) must not fail the next request's socket.
    if (this.socket !== socket) return;
    this.socket = undefined;
    const pending = this.pending;
    this.pending = undefined;
    pending?.reject(err);
  }

  private onData(chunk: Buffer): void {
    if (this.pending === undefined) return; // bytes after an answer: the next send resets the parser
    let data = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    if (this.bodyLeft === -1) {
      const end = data.indexOf(HEAD_END);
      if (end === -1) {
        this.buffered = data;
        return;
      }
      const head = data.toString('latin1', 0, end + 2);
      this.status = Number(head.slice(9, 12));
      this.closeAfter = CONNECTION_CLOSE.test(head);
      this.chunked = CHUNKED.test(head);
      const length = CONTENT_LENGTH.exec(head);
      // Neither: the body runs to the end of the connection, which this client does not support.
      if (!this.chunked && length === null) return this.fail(this.socket!, new Error(`HTTP ${this.status} without content-length or chunked encoding`));
      this.bodyLeft = this.chunked ? 0 : Number(length![1]);
      data = data.subarray(end + 4);
    }
    const done = this.chunked ? this.readChunks(data) : this.readLength(data);
    if (done) this.finish();
  }

  private readLength(data: Buffer): boolean {
    const take = Math.min(this.bodyLeft, data.length);
    this.keepErrorBody(data.subarray(0, take));
    this.bodyLeft -= take;
    return this.bodyLeft === 0;
  }

  /** bodyLeft: bytes of the current chunk still to come (its trailing CRLF included); 0 = at a size line. */
  private readChunks(data: Buffer): boolean {
    let at = 0;
    for (;;) {
      if (this.bodyLeft > 0) {
        const take = Math.min(this.bodyLeft, data.length - at);
        this.keepErrorBody(data.subarray(at, at + take)); // with the chunk's CRLF: only for an error message
        this.bodyLeft -= take;
        at += take;
        if (this.bodyLeft > 0) {
          this.buffered = Buffer.alloc(0);
          return false;
        }
      }
      const lineEnd = data.indexOf(CRLF, at);
      if (lineEnd === -1) {
        this.buffered = Buffer.from(data.subarray(at));
        return false;
      }
      const size = parseInt(data.toString('latin1', at, lineEnd), 16);
      if (size === 0) {
        // The last chunk: no trailers from the targets, so "0\r\n\r\n" ends the body.
        if (data.length - lineEnd < 4) {
          this.buffered = Buffer.from(data.subarray(at));
          return false;
        }
        return true;
      }
      at = lineEnd + 2;
      this.bodyLeft = size + 2;
    }
  }

  private keepErrorBody(bytes: Buffer): void {
    if (this.status !== 200 && bytes.length > 0) this.errorBody.push(Buffer.from(bytes));
  }

  private finish(): void {
    const pending = this.pending!;
    this.pending = undefined;
    const answer: RawAnswer = { status: this.status };
    if (this.status !== 200) answer.errorBody = Buffer.concat(this.errorBody).toString('utf8');
    if (this.closeAfter) this.close();
    pending.resolve(answer);
  }
}
