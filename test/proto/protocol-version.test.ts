import t from 'tap';
import { PROTOCOL_VERSION, describeProtocolMismatch, isCompatibleProtocol } from '../../proto/src/index.js';

t.test('only a peer on the same protocol version is compatible', async (t) => {
  t.ok(isCompatibleProtocol(PROTOCOL_VERSION));
  t.notOk(isCompatibleProtocol(PROTOCOL_VERSION + 1), 'a newer peer');
  t.notOk(isCompatibleProtocol(PROTOCOL_VERSION - 1), 'an older peer');
  t.notOk(isCompatibleProtocol(Number.NaN), 'garbage from the wire');
  t.notOk(isCompatibleProtocol(PROTOCOL_VERSION + 0.5));
});

t.test('a mismatch message names both versions and which side must upgrade', async (t) => {
  t.equal(
    describeProtocolMismatch(1, 2),
    'control protocol mismatch: this side speaks v1, the peer speaks v2; the peer is newer, upgrade this side',
  );
  t.equal(
    describeProtocolMismatch(3, 2),
    'control protocol mismatch: this side speaks v3, the peer speaks v2; the peer is older, upgrade the peer',
  );
  t.match(describeProtocolMismatch(1, 0), 'the peer sent no valid protocol version', 'proto3 default 0 means "not sent"');
});
