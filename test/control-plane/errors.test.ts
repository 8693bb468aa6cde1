import t from 'tap';
import { ZenovaError, errorTable, zenovaError } from '../../control-plane/src/errors.js';
import type { ErrorCode } from '../../control-plane/src/errors.js';

t.test('every code is a ZN_ERR_CP_ code with an HTTP error status and an OpenAI-style type', async (t) => {
  for (const [code, spec] of Object.entries(errorTable)) {
    t.match(code, /^ZN_ERR_CP_[A-Z0-9_]+$/, code);
    t.ok(spec.status >= 400 && spec.status < 600, `${code} status`);
    t.match(spec.type, /^[a-z_]+_error$/, `${code} type`);
    t.ok(spec.message.length > 0, `${code} message`);
  }
});

t.test('the codes the control plane relies on exist with their statuses', async (t) => {
  const expected: Array<[ErrorCode, number, boolean]> = [
    ['ZN_ERR_CP_NOT_FOUND', 404, false],
    ['ZN_ERR_CP_INVALID_REQUEST', 400, false],
    ['ZN_ERR_CP_BODY_TOO_LARGE', 413, false],
    ['ZN_ERR_CP_UNAUTHENTICATED', 401, false],
    ['ZN_ERR_CP_DATABASE_UNAVAILABLE', 503, true],
    ['ZN_ERR_CP_INTERNAL', 500, false],
  ];
  for (const [code, status, retryable] of expected) {
    t.equal(errorTable[code].status, status, code);
    t.equal(errorTable[code].retryable, retryable, `${code} retryable`);
  }
});

t.test('a ZenovaError carries its table entry and renders an OpenAI-style body', async (t) => {
  const err = zenovaError('ZN_ERR_CP_INVALID_REQUEST', "body field 'name': expected string");
  t.type(err, ZenovaError);
  t.type(err, Error);
  t.equal(err.code, 'ZN_ERR_CP_INVALID_REQUEST');
  t.equal(err.status, 400);
  t.equal(err.retryable, false);
  t.same(err.toBody(), {
    error: { message: "body field 'name': expected string", type: 'invalid_request_error', param: null, code: 'ZN_ERR_CP_INVALID_REQUEST' },
  });
  t.equal(zenovaError('ZN_ERR_CP_NOT_FOUND').message, errorTable.ZN_ERR_CP_NOT_FOUND.message, 'default message from the table');
});

t.test('an internal error never shows its own message to clients', async (t) => {
  const err = zenovaError('ZN_ERR_CP_INTERNAL', 'relation "secret_stuff" does not exist at pool.js:42');
  t.equal(err.toBody().error.message, errorTable.ZN_ERR_CP_INTERNAL.message);
  t.match(err.message, /secret_stuff/, 'the detail stays on the error for the log');
});
