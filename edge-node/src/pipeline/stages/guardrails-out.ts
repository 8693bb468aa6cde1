// Stage `guardrails-out` — the output rules of the key's guardrail policy over the reply: a JSON
// answer is checked whole here; a stream is wrapped (stream-guard.ts) and checked as it is
// delivered, framing kept. Raw relays (MCP) are checked by the MCP provider's guard, an event
// stream event by event.
import { applyPolicy, requestPolicy } from '../../guardrails/policy-engine.js';
import { guardStream } from '../../guardrails/stream-guard.js';
import { guardMcpOutput } from '../../providers/mcp/mcp-call.js';
import { resolveDeferredTexts } from '../../providers/deferred-json-texts.js';
import { isPartial, uncheckedTextMessage } from '../../providers/partial-texts.js';
import type { PipelineContext } from '../context.js';
import { countGuardedText } from '../response-text.js';
import { reject } from '../stage.js';
import type { Stage, StageResult } from '../stage.js';

export const guardrailsOutStage: Stage = {
  name: 'guardrails-out',
  always: false,
  run(ctx: PipelineContext): StageResult {
    const policy = requestPolicy(ctx);
    const reply = ctx.reply;
    if (policy === null || reply === undefined) return undefined;
    if (reply.kind === 'raw') return ctx.api === 'mcp' ? guardMcpOutput(ctx, policy) : undefined;
    const side = policy.output;
    const checks = side.broken !== null || side.rules.length > 0;
    // Tool-call input is walked only now that there are rules; text the walk did not reach cannot
    // pass unchecked (fail closed).
    if (reply.kind === 'json' && side.broken === null && checks) resolveDeferredTexts(reply.texts);
    // Counted before a rule masks or blocks it: a blocked answer's text was still generated (stage meter).
    if (reply.kind === 'json' && checks) countGuardedText(ctx, reply.texts);
    // What the rules cannot check but the answer does without (a chat answer's logprobs) is dropped.
    if (reply.kind === 'json' && checks) reply.keepChecked?.();
    if (reply.kind === 'json' && checks && isPartial(reply.texts)) return reject('ZN_ERR_GUARDRAIL_BLOCKED', side.broken?.message ?? uncheckedTextMessage(policy.id, 'output'));
    // A JSON answer without text (embeddings, the model list) has nothing for output rules.
    if (reply.kind === 'json' && reply.texts.length === 0) return undefined;
    if (side.broken !== null) return reject('ZN_ERR_GUARDRAIL_BLOCKED', side.broken.message);
    if (side.rules.length === 0) return undefined;
    if (reply.kind === 'json') return applyPolicy(ctx, policy, 'output', reply.texts);
    guardStream(ctx, policy, reply);
    return undefined;
  },
};
