// A listening node in front of a scripted upstream, for the guardrail tests that go through HTTP:
// key-a under guardrail policy "p" (the given rules), key-plain under none, and besides the
// harness's OpenAI route a `claude` alias to the same upstream as an Anthropic one. `services`
// stand in for the harness's (a spool that keeps the records, say).
import type { PipelineServices } from '../../../edge-node/src/cli/node-services.js';
import type { GuardrailRule } from '../../../proto/src/index.js';
import { bundleKey, newCallerKey } from '../config-fixtures.js';
import { startPipelineNode } from '../pipeline/pipeline-harness.js';
import type { PipelineNode } from '../pipeline/pipeline-harness.js';
import { policy } from './guardrail-fixtures.js';
import { startScriptedUpstream } from './scripted-upstream.js';
import type { ScriptedUpstream } from './scripted-upstream.js';

export interface GuardedNode {
  upstream: ScriptedUpstream;
  node: PipelineNode;
  /** The secret of key-plain (no policy); key-a's is node.secret. */
  plainSecret: string;
}

export async function startGuardedNode(t: { teardown(fn: () => unknown): void }, rules: GuardrailRule[], services?: Partial<PipelineServices>): Promise<GuardedNode> {
  const upstream = await startScriptedUpstream(t);
  const plain = newCallerKey();
  const node = await startPipelineNode(t, {
    upstreamUrl: upstream.url,
    ...(services !== undefined ? { services } : {}),
    bundle: (base, hash) => ({
      apiKeys: [bundleKey('key-a', hash, { guardrailPolicyId: 'p' }), bundleKey('key-plain', plain.sha256)],
      guardrailPolicies: [policy('p', rules)],
      upstreams: [...base.upstreams, { id: 'up-claude', name: 'claude', kind: 'anthropic', baseUrl: upstream.url, apiKey: 'sk-ant-upstream-0123456789', timeoutMs: 30_000 }],
      routes: [...base.routes, { alias: 'claude', targets: [{ upstream: 'claude', model: 'claude-real', weight: 1 }], fallbacks: [], timeoutMs: 30_000, retries: 0 }],
    }),
  });
  return { upstream, node, plainSecret: plain.secret };
}

/**
 * A streamed chat completion read raw (its status and SSE text), for the framing checks the SDK
 * would hide: `body` is sent with `stream: true` under key `secret`.
 */
export async function rawChatStream(node: PipelineNode, secret: string, body: Record<string, unknown>): Promise<{ status: number; body: string }> {
  const res = await fetch(`${node.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
    body: JSON.stringify({ ...body, stream: true }),
  });
  return { status: res.status, body: await res.text() };
}
