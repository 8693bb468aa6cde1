// The refusal codes both sides share: one table, the protocol code reused, and the code readable back
// from the gRPC status details the gateway sends.
import t from 'tap';
import {
  PROTOCOL_INCOMPATIBLE_CODE,
  RefusalCode,
  isRefusalCode,
  isRefusalRetryable,
  refusalCodeOfStatusDetails,
  refusalHint,
} from '../../proto/src/index.js';
import { refusalMessage, refusalStatus } from '../../control-plane/src/gateway/refusal.js';

t.test('every refusal code has a hint, a retry rule and a status whose details start with the code', async (t) => {
  for (const code of Object.values(RefusalCode)) {
    t.ok(refusalHint(code).length > 20, `${code} has an operator hint`);
    const status = refusalStatus(code, 'why it happened');
    t.equal(status.details, `${code}: why it happened`);
    t.equal(refusalCodeOfStatusDetails(status.details), code);
    t.same(refusalMessage(code, 'why it happened').refusal?.error, { code, message: 'why it happened', retryable: isRefusalRetryable(code) });
  }
  t.equal(RefusalCode.PROTOCOL_INCOMPATIBLE, PROTOCOL_INCOMPATIBLE_CODE, 'the protocol code is the one protocol-version.ts defines');
});

t.test('a node is told to stop retrying for credential, deletion and protocol problems, and to retry for transient ones', async (t) => {
  for (const code of ['CREDENTIAL_EXPIRED', 'CREDENTIAL_REVOKED', 'CREDENTIAL_SUPERSEDED', 'NODE_DELETED', 'PROTOCOL_INCOMPATIBLE'] as const) {
    t.equal(isRefusalRetryable(code), false, `${code} needs an operator`);
  }
  for (const code of ['SERVER_SHUTTING_DOWN', 'SERVER_UNAVAILABLE', 'HELLO_REQUIRED', 'SESSION_REPLACED'] as const) {
    t.equal(isRefusalRetryable(code), true, `${code} is transient`);
  }
  t.match(refusalHint('CREDENTIAL_EXPIRED'), /reenroll-command/);
});

t.test('status details that do not start with a known code yield no code', async (t) => {
  t.equal(refusalCodeOfStatusDetails('connection lost'), undefined);
  t.equal(refusalCodeOfStatusDetails('NOT_A_CODE: x'), undefined);
  t.equal(refusalCodeOfStatusDetails('NODE_DELETED'), 'NODE_DELETED');
  t.equal(isRefusalCode('NODE_DELETED'), true);
  t.equal(isRefusalCode('node_deleted'), false);
});
