// `anthropic-beta` is an HTTP list (RFC 9110 §5.6.1): optional whitespace around its commas, and
// empty elements a recipient must accept. The node reads it so and forwards the names it found as
// one normalised value (`a, b`); a header naming no beta at all is as if absent. A malformed name,
// more than 32 names, and the betas billed above the node's price are still refused.
import t from 'tap';
import { startFakeAnthropicUpstream } from '../fixtures/fake-anthropic-upstream.js';
import { startFakeUpstream } from '../fixtures/fake-upstream.js';
import { startPipelineNode, withClaudeRoute } from './pipeline/pipeline-harness.js';

t.test('anthropic-beta as an HTTP list', async (t) => {
  const upstream = await startFakeUpstream(t);
  const anthropic = await startFakeAnthropicUpstream(t);
  const node = await startPipelineNode(t, { upstreamUrl: upstream.url, bundle: (base) => withClaudeRoute(base, anthropic.url) });
  const messages = (beta: string) =>
    fetch(`${node.origin}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': node.secret, 'anthropic-version': '2023-06-01', 'anthropic-beta': beta },
      body: JSON.stringify({ model: 'claude', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
    });

  t.test('spaces around commas and empty elements are accepted; the upstream gets the names as one normalised list', async (t) => {
    const cases: Array<[string, string]> = [
      ['a-1 ,b-2', 'a-1, b-2'],
      ['a-1 \t,\t b-2', 'a-1, b-2'],
      ['a-1,,b-2', 'a-1, b-2'],
      ['a-1, ,b-2', 'a-1, b-2'],
      ['a-1,', 'a-1'],
      [',a-1', 'a-1'],
      ['a-1,b-2', 'a-1, b-2'],
      ['prompt-caching-2024-07-31', 'prompt-caching-2024-07-31'],
      // Empty elements do not count against the 32 names.
      [`${Array.from({ length: 32 }, (_, i) => `b${i}`).join(',,')},`, Array.from({ length: 32 }, (_, i) => `b${i}`).join(', ')],
    ];
    for (const [sent, forwarded] of cases) {
      const before = anthropic.requests.length;
      const res = await messages(sent);
      t.equal(res.status, 200, JSON.stringify(sent));
      await res.arrayBuffer();
      t.equal(anthropic.requests.length, before + 1, `${JSON.stringify(sent)}: forwarded`);
      t.equal(anthropic.requests.at(-1)?.headers['anthropic-beta'], forwarded, `${JSON.stringify(sent)}: the upstream sees ${JSON.stringify(forwarded)}`);
    }
  });

  t.test('a header that names no beta is treated as absent: no anthropic-beta goes upstream', async (t) => {
    for (const sent of [',', ' , ,', ',,,']) {
      const before = anthropic.requests.length;
      const res = await messages(sent);
      t.equal(res.status, 200, JSON.stringify(sent));
      await res.arrayBuffer();
      t.equal(anthropic.requests.length, before + 1, `${JSON.stringify(sent)}: forwarded`);
      t.notOk('anthropic-beta' in (anthropic.requests.at(-1)?.headers ?? {}), `${JSON.stringify(sent)}: no anthropic-beta header upstream`);
    }
  });

  t.test('malformed names, more than 32 names and betas billed above the price are still refused, nothing forwarded', async (t) => {
    const before = anthropic.requests.length;
    const refusals: Array<[string, RegExp]> = [
      ['a b', /anthropic-beta header must be a comma-separated list/],
      ['a-1;b-2', /anthropic-beta header must be a comma-separated list/],
      ['a-1, b 2', /anthropic-beta header must be a comma-separated list/],
      [Array.from({ length: 33 }, (_, i) => `b${i}`).join(','), /at most 32 beta names/],
      ['a-1 , ,fast-mode-2026-02-01', /anthropic-beta: no fast-mode betas/],
      [',context-1m-2025-08-07', /anthropic-beta: no context-1m betas/],
      ['a-1,\tserver-side-fallback-2026-01-01 ,', /anthropic-beta: no server-side-fallback betas/],
    ];
    for (const [sent, message] of refusals) {
      const res = await messages(sent);
      t.equal(res.status, 400, JSON.stringify(sent));
      t.match(await res.json(), { type: 'error', error: { type: 'invalid_request_error', code: 'ZN_ERR_INVALID_REQUEST', message } }, JSON.stringify(sent));
    }
    t.equal(anthropic.requests.length, before, 'nothing was forwarded');
  });
});
