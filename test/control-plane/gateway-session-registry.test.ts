// The gateway's session registry: one live session per node, replacement, and node events that
// reach a session which authenticated before the event but went live after it.
import t from 'tap';
import { SessionRegistry, type RegisteredSession } from '../../control-plane/src/gateway/session-registry.js';
import type { RefusalCode } from '../../proto/src/index.js';

function fakeSession(nodeId: string, sessionId: string): RegisteredSession & { endedWith: RefusalCode[] } {
  const endedWith: RefusalCode[] = [];
  return { nodeId, sessionId, endedWith, end: (code) => { endedWith.push(code); } };
}

t.test('a newer session of the same node replaces the older, and the older leaving does not evict the newer', async (t) => {
  const registry = new SessionRegistry();
  const older = fakeSession('node-a', 's1');
  const newer = fakeSession('node-a', 's2');
  const elsewhere = fakeSession('node-b', 's3');
  registry.register(older);
  registry.register(elsewhere);
  registry.register(newer);
  t.same(older.endedWith, ['SESSION_REPLACED']);
  t.same(newer.endedWith, []);
  t.equal(registry.size, 2);
  registry.unregister(older);
  t.equal(registry.size, 2, 'the replaced session unregistering leaves its successor in place');
  t.same(registry.sessions().map((s) => s.sessionId).sort(), ['s2', 's3']);
});

t.test('events end the node\'s live session with the matching refusal and leave other nodes alone', async (t) => {
  const registry = new SessionRegistry();
  const deleted = fakeSession('node-a', 's1');
  const revoked = fakeSession('node-b', 's2');
  const bystander = fakeSession('node-c', 's3');
  for (const s of [deleted, revoked, bystander]) registry.register(s);
  registry.dispatch({ type: 'node-deleted', nodeId: 'node-a' });
  registry.dispatch({ type: 'credentials-revoked', nodeId: 'node-b' });
  t.same(deleted.endedWith, ['NODE_DELETED']);
  t.same(revoked.endedWith, ['CREDENTIAL_REVOKED']);
  t.same(bystander.endedWith, []);
});

t.test('an upgrade starting ends no session and is not remembered as one that would', async (t) => {
  const registry = new SessionRegistry();
  const session = fakeSession('node-a', 's1');
  registry.register(session);
  const cursor = registry.eventCursor();
  registry.dispatch({ type: 'upgrade-started', nodeId: 'node-a', fromVersion: '0.0.9', toVersion: '0.1.0', hostname: 'edge-host-1' });
  t.same(session.endedWith, [], 'the live session goes on: the updater restarts node-edge itself');
  t.equal(registry.eventSince('node-a', cursor), undefined, 'a session on its way is not refused for it');
  t.equal(registry.size, 1);
});

t.test('an event after a session took its cursor is reported to it; older events and other nodes are not', async (t) => {
  const registry = new SessionRegistry();
  registry.dispatch({ type: 'node-deleted', nodeId: 'node-a' });
  const cursor = registry.eventCursor();
  t.equal(registry.eventSince('node-a', cursor), undefined, 'an event before the cursor is history');
  registry.dispatch({ type: 'credentials-revoked', nodeId: 'node-a' });
  t.equal(registry.eventSince('node-a', cursor), 'credentials-revoked');
  t.equal(registry.eventSince('node-b', cursor), undefined);
});

t.test('remembered events are forgotten after a few minutes', async (t) => {
  const registry = new SessionRegistry();
  const cursor = registry.eventCursor();
  const start = 1_000_000;
  registry.dispatch({ type: 'node-deleted', nodeId: 'node-a' }, start);
  registry.dispatch({ type: 'node-deleted', nodeId: 'node-b' }, start + 10 * 60_000);
  t.equal(registry.eventSince('node-a', cursor), undefined, 'the old event was pruned');
  t.equal(registry.eventSince('node-b', cursor), 'node-deleted');
});
