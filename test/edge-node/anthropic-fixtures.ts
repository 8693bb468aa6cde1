// Shared by the Anthropic surface's tests: the SDK error a call failed with, and a spool that only
// keeps the finished records in memory.
import Anthropic from '@anthropic-ai/sdk';
import type { RequestRecord } from '../../proto/src/index.js';
import type { RequestSpool } from '../../edge-node/src/spool/request-spool.js';

export type AnthropicSdkError = InstanceType<typeof Anthropic.APIError>;

/** The error an Anthropic SDK call failed with (it must fail). */
export async function anthropicSdkError(promise: Promise<unknown>): Promise<AnthropicSdkError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof Anthropic.APIError) return err;
    throw err;
  }
  throw new Error('expected the call to fail with an APIError');
}

/** A spool that pushes each finished record into `records`. */
export function recordsInto(records: RequestRecord[]): RequestSpool {
  return {
    open: () => undefined,
    finalise: async (record) => {
      records.push(record);
    },
    keepsBodies: () => false,
    fullness: () => 0,
  };
}
