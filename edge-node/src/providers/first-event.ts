/**
 * A provider's stream with its first event already read, inside the upstream attempt: an upstream
 * that fails at once (an error event, a reset, a stall, only keep-alive comments, an empty body)
 * then fails the attempt while nothing was sent to the caller, under the attempt's timeout, and the
 * route's retries and fallbacks still apply. Throws what reading the first event threw.
 */
import type { StreamEvent } from '../pipeline/context.js';

export async function firstEventRead(events: AsyncIterable<StreamEvent>): Promise<AsyncIterable<StreamEvent>> {
  const source = events[Symbol.asyncIterator]();
  let pending: IteratorResult<StreamEvent> | undefined = await source.next();
  const iterator: AsyncIterator<StreamEvent> = {
    next: () => {
      if (pending === undefined) return source.next();
      const first = pending;
      pending = undefined;
      return Promise.resolve(first);
    },
    return: (value?: unknown) => source.return?.(value) ?? Promise.resolve({ done: true, value: undefined }),
  };
  return { [Symbol.asyncIterator]: () => iterator };
}
