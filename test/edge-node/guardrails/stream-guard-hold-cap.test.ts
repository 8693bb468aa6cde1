// A match longer than the stream guard's hold cap (a PEM block of more than 64 Ki characters) stays
// masked to its end: its tail past the cap is not released in the clear, and text after it is.
import t from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import { guardStream } from '../../../edge-node/src/guardrails/stream-guard.js';
import { MAX_HELD_CHARS } from '../../../edge-node/src/guardrails/text-guard.js';
import { drain, guardContext, openAiStream, openAiText, policy } from './guardrail-fixtures.js';

const SECRET_MASK = policy('pem', [{ detector: 'secret', action: 'mask', on: 'output' }]);

async function streamed(deltas: string[]): Promise<{ text: string; verdicts: Array<{ matches: number }>; error: unknown }> {
  const reply = openAiStream(deltas);
  const { ctx } = guardContext({ policies: [SECRET_MASK], policyId: 'pem', reply, stream: true });
  guardStream(ctx, compilePolicy(SECRET_MASK), reply);
  const { events, error } = await drain(reply);
  return { text: openAiText(events), verdicts: ctx.guardrails, error };
}

function inDeltas(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

t.test('a PEM block longer than the hold cap is masked through its END line, in small deltas', async (t) => {
  const body = 'MIIEvQIBADANBgkqhkiG9w0BAQEFAASC'.repeat(Math.ceil(80_000 / 32)).match(/.{1,64}/g)!.join('\n');
  t.ok(body.length > MAX_HELD_CHARS, 'the block is longer than the cap');
  const text = `key:\n-----BEGIN PRIVATE KEY-----\n${body}\n-----END PRIVATE KEY-----\nafter the key, plain words.`;
  const got = await streamed(inDeltas(text, 16));
  t.equal(got.error, undefined);
  t.equal(got.text, 'key:\n[SECRET]\nafter the key, plain words.', 'one placeholder, no base64 tail, the END line masked, the rest intact');
  t.same(got.verdicts.map((v) => v.matches), [1], 'counted as one match');
});

t.test('a PEM block that never ends is masked to the end of the stream', async (t) => {
  const text = `-----BEGIN PRIVATE KEY-----\n${'A'.repeat(MAX_HELD_CHARS * 2)}`;
  const got = await streamed(inDeltas(text, 1000));
  t.equal(got.error, undefined);
  t.equal(got.text, '[SECRET]');
});

t.test('an assigned secret value longer than the hold cap stays masked to its end, whatever the name', async (t) => {
  const value = 'A1b2'.repeat(25_000);
  for (const assignment of ['token: ', 'password=', 'api_key: ', '密码：']) {
    const got = await streamed(inDeltas(`${assignment}${value} after`, 16));
    t.equal(got.error, undefined);
    t.equal(got.text, `${assignment}[SECRET] after`, `${assignment.trim()}: one placeholder, none of the value in clear`);
    t.same(got.verdicts.map((v) => v.matches), [1], 'counted as one match');
  }
});

t.test('a value and a PEM block that overlap are masked as one, in the whole text and in a stream', async (t) => {
  const pem = '-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq98Qv1\nAbCdEfGh0123456789\n-----END RSA PRIVATE KEY-----';
  for (const head of ['password=hunter22', 'sk-proj-Abc123Def456Ghi789Jkl0']) {
    const text = `${head}${pem}\nthen words`;
    const got = await streamed(inDeltas(text, 7));
    t.equal(got.text, `${head.startsWith('password') ? 'password=' : ''}[SECRET]\nthen words`, `${head}: no part of the key in clear`);
    t.same(got.verdicts.map((v) => v.matches), [1]);
    const whole = await streamed([text]);
    t.equal(whole.text, got.text, 'the whole text alike');
  }
});
