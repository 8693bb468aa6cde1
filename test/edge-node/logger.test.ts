// Logs never carry secrets, wherever in a logged object they sit.
import t from 'tap';
import { createLogger, scrubSecrets } from '../../edge-node/src/logger.js';

t.test('authorization headers, API keys and tokens are redacted in log lines', async (t) => {
  const lines: string[] = [];
  const log = createLogger({ destination: { write: (line: string) => void lines.push(line) } });
  log.info(
    {
      headers: { authorization: 'Bearer sk-caller-1', 'x-api-key': 'sk-caller-2', cookie: 'session=sk-caller-3' },
      req: { headers: { 'x-api-key': 'sk-caller-4' } },
      config: { upstreams: [{ name: 'u', apiKey: 'sk-upstream-5' }] },
      token: 'sk-token-6',
      nested: { enrol: { password: 'sk-pass-7' } },
      keep: 'visible',
    },
    'hello',
  );
  t.equal(lines.length, 1);
  const line = lines[0]!;
  for (let i = 1; i <= 7; i++) t.notMatch(line, new RegExp(`-${i}\\b`), `secret ${i} is gone`);
  t.match(line, /"keep":"visible"/);
  t.match(line, /\[redacted\]/);
  t.match(JSON.parse(line), { service: 'node-edge', msg: 'hello' });
});

t.test('secrets inside errors, arrays and child bindings are redacted; other values and the logged object are untouched', async (t) => {
  const lines: string[] = [];
  const log = createLogger({ destination: { write: (line: string) => void lines.push(line) } });
  const err = Object.assign(new Error('upstream refused'), { token: 'sk-err-1', response: { headers: { authorization: 'Bearer sk-err-2' } } });
  const logged = { err, list: [{ apiKey: 'sk-list-3' }, { name: 'kept-4' }], plain: 5, when: new Date(0), bytes: Buffer.from('abc') };
  log.child({ password: 'sk-binding-5', requestId: 'req-6' }).warn(logged, 'failed');
  const line = lines[0]!;
  for (const secret of ['sk-err-1', 'sk-err-2', 'sk-list-3', 'sk-binding-5']) t.notMatch(line, secret, `${secret} is gone`);
  t.match(JSON.parse(line), { err: { message: 'upstream refused', type: 'Error' }, list: [{ apiKey: '[redacted]' }, { name: 'kept-4' }], plain: 5, requestId: 'req-6' });
  t.equal(err.token, 'sk-err-1', 'the error itself was not changed');
  t.equal(logged.list[0]!.apiKey, 'sk-list-3', 'the logged object was not changed');
});

t.test('keys are checked four levels deep, and a line with nothing to hide is logged as it is', async (t) => {
  t.same(scrubSecrets({ a: { b: { c: { token: 'x' } } } }), { a: { b: { c: { token: '[redacted]' } } } });
  t.same(scrubSecrets({ a: { b: { c: { d: { token: 'x' } } } } }), { a: { b: { c: { d: { token: 'x' } } } } }, 'the fifth level is not walked');
  const clean = { method: 'POST', usage: { inputTokens: 3 } };
  t.equal(scrubSecrets(clean), clean, 'the same object, not a copy');
});
