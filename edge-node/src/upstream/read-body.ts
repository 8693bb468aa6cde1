// Reads an upstream body into memory with a ceiling, so a runaway upstream cannot exhaust the node.
import type { Readable } from 'node:stream';
import { isZenovaError, zenovaError } from '../errors.js';
import type { ZenovaError } from '../errors.js';

/** The errors readBodyBounded failed with because the body outgrew its bound (isBodyTooLarge). */
const tooLargeErrors = new WeakSet<ZenovaError>();

/**
 * Whether `err` is readBodyBounded's refusal of a body past its bound: the upstream answered (and
 * did the work), unlike a body cut by the network, so a caller may charge for it.
 */
export function isBodyTooLarge(err: unknown): err is ZenovaError {
  return isZenovaError(err) && tooLargeErrors.has(err);
}

/**
 * The whole body, or a rejection: ZN_ERR_UPSTREAM_ERROR past `maxBytes` (the body is destroyed; isBodyTooLarge),
 * the stream's own error (an abort, a reset), or an error when it closes without ending. Reads
 * with 'data' events rather than an async iterator: this runs once per upstream answer and the
 * iterator's machinery cost more than the read.
 */
export function readBodyBounded(body: Readable, maxBytes: number, upstream: string): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    let settled = false;
    const fail = (err: Error): void => {
      if (settled) return;
      settled = true;
      reject(err);
    };
    body.on('data', (chunk: Buffer) => {
      if (settled) return;
      total += chunk.length;
      if (total > maxBytes) {
        const tooLarge = zenovaError('ZN_ERR_UPSTREAM_ERROR', `Upstream "${upstream}" sent a body larger than ${maxBytes} bytes.`);
        tooLargeErrors.add(tooLarge);
        fail(tooLarge);
        body.destroy();
        return;
      }
      chunks.push(chunk);
    });
    body.once('end', () => {
      if (settled) return;
      settled = true;
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total));
    });
    body.once('error', fail);
    // 'close' follows 'end' on every body: the error (and its stack) only when it did not end.
    body.once('close', () => {
      if (!settled) fail(new Error(`the body of upstream "${upstream}" closed before it ended`));
    });
  });
}

/** The body as JSON, or `undefined` when it is not JSON (error bodies are read for their code only). */
export function parseJsonOrUndefined(bytes: Buffer): unknown {
  try {
    // A UTF-8 byte order mark is ignored (RFC 8259 §8.1 lets parsers do so): JSON.parse refuses it,
    // and such an answer would otherwise be taken as text that is not JSON (its escapes unread).
    const bom = bytes.length >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf;
    return JSON.parse((bom ? bytes.subarray(3) : bytes).toString('utf8'));
  } catch {
    return undefined;
  }
}
