// The node's error table and the error type built on it.
import t from 'tap';
import { ZenovaError, errorTable, zenovaError } from '../../edge-node/src/errors.js';
import type { ErrorCode } from '../../edge-node/src/errors.js';

t.test('every node code is ZN_ERR_ but never the control plane prefix, with an HTTP error status', async (t) => {
  const codes = Object.keys(errorTable) as ErrorCode[];
  t.ok(codes.length >= 11);
  for (const code of codes) {
    t.match(code, /^ZN_ERR_[A-Z_]+$/);
    t.notMatch(code, /^ZN_ERR_CP_/);
    const spec = errorTable[code];
    t.ok(spec.status >= 400 && spec.status < 600, `${code} has an error status`);
    t.ok(spec.message.length > 0 && spec.type.length > 0);
  }
  t.match(errorTable, {
    ZN_ERR_BODY_TOO_LARGE: { status: 413 },
    ZN_ERR_API_KEY_MISSING: { status: 401 },
    ZN_ERR_API_KEY_INVALID: { status: 401 },
    ZN_ERR_MODEL_NOT_FOUND: { status: 404 },
    ZN_ERR_UPSTREAM_UNAVAILABLE: { status: 502, retryable: true },
    ZN_ERR_UPSTREAM_TIMEOUT: { status: 504, retryable: true },
    ZN_ERR_INTERNAL: { status: 500 },
  });
});

t.test('a ZenovaError takes status, type and retryable from the table and renders the OpenAI body', async (t) => {
  const err = zenovaError('ZN_ERR_MODEL_NOT_FOUND', 'no "x" here');
  t.ok(err instanceof ZenovaError && err instanceof Error);
  t.equal(err.status, 404);
  t.equal(err.retryable, false);
  t.same(err.toBody(), { error: { message: 'no "x" here', type: 'invalid_request_error', param: 'model', code: 'ZN_ERR_MODEL_NOT_FOUND' } });
  t.equal(zenovaError('ZN_ERR_INTERNAL').message, errorTable.ZN_ERR_INTERNAL.message, 'the table message is the default');
  t.equal(zenovaError('ZN_ERR_UPSTREAM_ERROR', 'x', { status: 429, retryable: true }).status, 429, 'status can be overridden per instance');
});
