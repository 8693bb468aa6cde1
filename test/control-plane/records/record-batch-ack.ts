// Hands a node's message to the record batch handler as the gateway does and returns its ack.
import type { ControlMessage, NodeMessage, RecordBatchAck } from '../../../proto/src/index.js';
import type { NodeStreamHandler, StreamNode } from '../../../control-plane/src/gateway/node-stream-handler.js';

export async function ackOf(handler: NodeStreamHandler, node: StreamNode, message: NodeMessage): Promise<RecordBatchAck> {
  const sent: ControlMessage[] = [];
  await handler.handle(node, message, (m) => {
    sent.push(m);
    return true;
  });
  const ack = sent[0]?.recordBatchAck;
  if (ack === undefined) throw new Error('no ack');
  return ack;
}
