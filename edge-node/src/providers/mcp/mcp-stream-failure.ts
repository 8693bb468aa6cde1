/**
 * The end of a POST's event stream (MCP streamable HTTP) that the tool server failed mid-way (timed
 * out between events, reset, an event too long): its head went out long ago, so no error status
 * can be sent, and a stream merely cut leaves each request of the POST unanswered, which MCP
 * clients wait on until their own request timeout (the official SDK's: 60 s). Instead each request
 * still unanswered gets a JSON-RPC error naming the node's code, as the guardrail block of the same
 * stream does (mcp-event-guard.ts), and the stream ends normally; the record says `failed` with
 * that code. A POST owing no answer (notifications only) is cut as before.
 */
import type { ZenovaError } from '../../errors.js';
import { idJson } from './jsonrpc-message.js';
import type { JsonRpcId } from './jsonrpc-message.js';
import { HOLD_FROM_HERE } from './mcp-answer-hold.js';

/** JSON-RPC error code of the answers the node makes up for a POST's requests (implementation-defined range). */
export const NODE_ERROR_RPC_CODE = -32000;

const encoder = new TextEncoder();

export interface PendingAnswers {
  /**
   * Ids of the POST's requests the stream still owes an answer, kept current by the source (the
   * hold removes each as its answer is delivered, and owes none once the completing event came).
   */
  pending: Set<JsonRpcId>;
  /**
   * The node's error for a failure of the source, or undefined to let it through as it came (the
   * caller left). Called before the answers are yielded (the record's outcome is set here).
   */
  failed(err: unknown): ZenovaError | undefined;
}

/**
 * One SSE event per id: a JSON-RPC error carrying `error`'s message and, under data.code, its code.
 * Each id is echoed as the request wrote it (past 2^53 too: idJson), so the client matches the answer.
 */
export function rpcErrorEvents(ids: Iterable<JsonRpcId>, error: ZenovaError): string {
  const rpcError = JSON.stringify({ code: NODE_ERROR_RPC_CODE, message: error.message, data: { code: error.code } });
  let out = '';
  for (const id of ids) out += `event: message\ndata: {"jsonrpc":"2.0","id":${idJson(id)},"error":${rpcError}}\n\n`;
  return out;
}

/**
 * `source` (a POST's event stream, cut into whole events by holdCompletingEvent, so a failure
 * always falls between events) as is; when it fails while requests are pending, their error
 * answers end it instead, held with the stream's end until the record is durable (HOLD_FROM_HERE),
 * as the event completing a call is.
 */
export async function* answerPendingOnFailure(source: AsyncIterable<Uint8Array>, answers: PendingAnswers): AsyncGenerator<Uint8Array> {
  try {
    yield* source;
  } catch (err) {
    if (answers.pending.size === 0) throw err;
    const error = answers.failed(err);
    if (error === undefined) throw err;
    yield HOLD_FROM_HERE;
    yield encoder.encode(rpcErrorEvents(answers.pending, error));
    answers.pending.clear();
  }
}
