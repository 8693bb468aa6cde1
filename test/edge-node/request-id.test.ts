// x-request-id: which caller ids are kept and what minted ids look like.
import t from 'tap';
import { REQUEST_ID_PATTERN, clientRequestIdOf, generateRequestId } from '../../edge-node/src/request-id.js';

t.test('minted ids are req_ + 26 Crockford base32 characters, unique, and sort by time', async (t) => {
  const ids = new Set(Array.from({ length: 1000 }, () => generateRequestId()));
  t.equal(ids.size, 1000);
  for (const id of ids) {
    t.match(id, /^req_[0-9A-HJKMNP-TV-Z]{26}$/);
    t.ok(REQUEST_ID_PATTERN.test(id), 'a minted id would itself be accepted from a caller');
  }
  const earlier = generateRequestId(1_700_000_000_000);
  const later = generateRequestId(1_700_000_000_001);
  t.ok(earlier.slice(0, 14) < later.slice(0, 14), 'the time part orders ids');
});

t.test("a caller's own id is kept only when it is one well-formed value", async (t) => {
  t.equal(clientRequestIdOf({ 'x-request-id': 'abc-123' }), 'abc-123');
  t.equal(clientRequestIdOf({ 'x-request-id': 'A'.repeat(128) }), 'A'.repeat(128));
  for (const bad of [undefined, '', 'A'.repeat(129), '.leading-dot', 'with space', 'new\nline', 'ünïcode', ['a', 'b']]) {
    t.equal(clientRequestIdOf({ 'x-request-id': bad }), undefined, `not kept: ${JSON.stringify(bad)}`);
  }
});

t.test("x-client-request-id is the caller's id before x-request-id, and a malformed one yields to it", async (t) => {
  t.equal(clientRequestIdOf({ 'x-client-request-id': 'mine', 'x-request-id': 'proxy' }), 'mine');
  t.equal(clientRequestIdOf({ 'x-client-request-id': 'bad id', 'x-request-id': 'proxy' }), 'proxy');
  t.equal(clientRequestIdOf({}), undefined);
});
