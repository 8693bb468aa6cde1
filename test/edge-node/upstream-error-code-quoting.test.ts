// An upstream's error answer names its `code` or `type`, which the node quotes in the caller's
// error and its log line; the upstream chooses that value, so one that could be a credential (the
// node's own key for it echoed back, a key shape, a random token) is not quoted.
import t from 'tap';
import { upstreamAnswerError, upstreamStatusError } from '../../edge-node/src/upstream/upstream-failure.js';

const KEY = 'sk-ant-SECRET-AAAA-0123456789';
const withCode = (code: string): unknown => ({ error: { code, message: 'no' } });

t.test('ordinary error codes and types are quoted', async (t) => {
  for (const code of ['invalid_api_key', 'overloaded_error', 'DeploymentNotFound', 'context_length_exceeded', '1001', 'rate_limit.v2', 'demo_upstream_failure']) {
    t.match(upstreamStatusError('up', 400, withCode(code), KEY).message, `(${code})`, code);
  }
});

t.test("the node's key echoed as the code, in whole or in part, is not quoted", async (t) => {
  for (const code of [KEY, KEY.slice(0, 15), KEY.slice(-15)]) {
    const message = upstreamStatusError('up', 401, withCode(code), KEY).message;
    t.equal(message, 'Upstream "up" answered HTTP 401.', code);
  }
  t.equal(upstreamAnswerError('up', withCode(KEY)).message, 'Upstream "up" answered HTTP 2xx with an error object.', 'an in-band error too, without the key known');
});

t.test('credential shapes and random tokens are not quoted, whatever key the node holds', async (t) => {
  for (const code of ['sk-proj-abcdefghijklmnopqrstuvwx', 'AKIAABCDEFGHIJKLMNOP', 'ghp_abcdefghijklmnopqrstuvwxyz0123456789', 'tok-AbCdEfGhIjKlMnOpQr', 'key-12345678']) {
    // The upstream's message of a 400 is relayed (docs/errors.md), not its code.
    const err = upstreamStatusError('up', 400, withCode(code), null);
    t.equal(err.message, 'Upstream "up" answered HTTP 400: no', code);
    t.notOk('upstream_code' in err.toBody().error, `${code}: not given as the upstream's code either`);
  }
});
