// Reads an upstream body into memory with a ceiling, so a runaway upstream cannot exhaust the node.
import { zenovaError } from '../errors.js';

export async function readBodyBounded(body: AsyncIterable<Uint8Array> & { destroy(err?: Error): unknown }, maxBytes: number, upstream: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of body) {
    total += chunk.length;
    if (total > maxBytes) {
      body.destroy();
      throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `Upstream "${upstream}" sent a body larger than ${maxBytes} bytes.`);
    }
    chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
  }
  return Buffer.concat(chunks, total);
}

/** The body as JSON, or `undefined` when it is not JSON (error bodies are read for their code only). */
export function parseJsonOrUndefined(bytes: Buffer): unknown {
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    return undefined;
  }
}
