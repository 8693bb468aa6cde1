// The error event that ends a caller's Anthropic stream keeps the type the upstream gave its
// in-band error (an SDK may act on overloaded_error), except the node's own credential trouble:
// an upstream authentication_error or permission_error would read as the caller's key refused,
// so it stays the node's api_error (as an upstream HTTP 401/403 becomes a 502).
import t from 'tap';
import { errorStreamEvent } from '../../edge-node/src/providers/anthropic/messages-stream.js';
import { upstreamStreamError } from '../../edge-node/src/upstream/upstream-failure.js';

function callerEventType(upstreamType: string): string {
  const failure = upstreamStreamError('claude', { type: 'error', error: { type: upstreamType, message: 'whatever the upstream says' } });
  const event = errorStreamEvent(failure.code, failure.message, failure);
  const body = JSON.parse(event.sse.data) as { error: { type: string; code: string } };
  t.equal(body.error.code, 'ZN_ERR_UPSTREAM_ERROR', `${upstreamType}: the node's code`);
  return body.error.type;
}

t.test('the upstream\'s own error type goes on, but never one that blames the node\'s key on the caller', async (t) => {
  t.equal(callerEventType('overloaded_error'), 'overloaded_error');
  t.equal(callerEventType('rate_limit_error'), 'rate_limit_error');
  t.equal(callerEventType('invalid_request_error'), 'invalid_request_error');
  t.equal(callerEventType('authentication_error'), 'api_error', 'the node\'s upstream key refused is not the caller\'s');
  t.equal(callerEventType('permission_error'), 'api_error');
  t.equal(callerEventType('something_new_error'), 'api_error', 'an unknown type: the node\'s');
});
