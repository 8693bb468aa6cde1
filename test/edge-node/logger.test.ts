// Logs never carry secrets, wherever in a logged object they sit.
import t from 'tap';
import { createLogger } from '../../edge-node/src/logger.js';

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
