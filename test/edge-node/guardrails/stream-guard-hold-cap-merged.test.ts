// A match merged from overlapping ones (a long unquoted value running straight into a PEM block)
// that the stream guard's hold cap cuts through stays masked to its end: the guard keeps the head
// of the part that reaches the end (the PEM header), not the head of the value, which alone does
// not tell that the block goes on.
import t from 'tap';
import { compilePolicy } from '../../../edge-node/src/guardrails/compiled-policy.js';
import { guardStream } from '../../../edge-node/src/guardrails/stream-guard.js';
import { MAX_HELD_CHARS, TextGuard, VerdictTally } from '../../../edge-node/src/guardrails/text-guard.js';
import type { GuardrailVerdict } from '../../../proto/src/index.js';
import { drain, guardContext, openAiStream, openAiText, policy } from './guardrail-fixtures.js';

const SECRET_MASK = policy('pem', [{ detector: 'secret', action: 'mask', on: 'output' }]);
const BODY = 'MIIEvQIBADANBgkqhkiG9w0BAQEFAASC'.repeat(Math.ceil(80_000 / 32)).match(/.{1,64}/g)!.join('\n');

function inDeltas(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

function whole(text: string): string {
  return new TextGuard(compilePolicy(SECRET_MASK).output, new VerdictTally('pem', 'output', [])).whole(text);
}

async function streamed(deltas: string[]): Promise<{ text: string; verdicts: GuardrailVerdict[]; error: unknown }> {
  const reply = openAiStream(deltas);
  const { ctx } = guardContext({ policies: [SECRET_MASK], policyId: 'pem', reply, stream: true });
  guardStream(ctx, compilePolicy(SECRET_MASK), reply);
  const { events, error } = await drain(reply);
  return { text: openAiText(events), verdicts: ctx.guardrails, error };
}

t.test('an unquoted value longer than 256 characters running into a PEM block longer than the cap is masked through its END line, streamed as whole', async (t) => {
  t.ok(BODY.length > MAX_HELD_CHARS, 'the block is longer than the cap');
  for (const valueLength of [20, 250, 300, 1000]) {
    for (const [name, header, footer] of [
      ['password=', '-----BEGIN PRIVATE KEY-----', '-----END PRIVATE KEY-----'],
      ['api_key: ', '-----BEGIN PGP PRIVATE KEY BLOCK-----', '-----END PGP PRIVATE KEY BLOCK-----'],
    ]) {
      const text = `${name}${'A1b2'.repeat(valueLength / 4)}${header}\n${BODY}\n${footer}\nafter the key, plain words.`;
      const expected = `${name}[SECRET]\nafter the key, plain words.`;
      t.equal(whole(text), expected, `${valueLength}: the whole text masks value and block as one`);
      for (const size of [16, 1000]) {
        const got = await streamed(inDeltas(text, size));
        t.equal(got.error, undefined);
        t.equal(got.text, expected, `${name}${valueLength} characters, ${size}-character deltas: no line of the key body in clear`);
        t.same(got.verdicts.map((v) => v.matches), [1], 'counted as one match');
      }
    }
  }
});

t.test('a merged match the cap cuts through with its block never closed is masked to the end of the stream', async (t) => {
  // Lines: the value's head, kept alone, would take in only the first one.
  const text = `token=${'x9'.repeat(200)}-----BEGIN RSA PRIVATE KEY-----\n${`${'A'.repeat(63)}\n`.repeat(MAX_HELD_CHARS / 32)}`;
  const got = await streamed(inDeltas(text, 1000));
  t.equal(got.error, undefined);
  t.equal(got.text, 'token=[SECRET]');
});
