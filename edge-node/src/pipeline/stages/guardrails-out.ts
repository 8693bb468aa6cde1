// Stage `guardrails-out` — the output rules of the key's guardrail policy over the reply: a JSON
// answer is checked whole here; a stream is wrapped (stream-guard.ts) and checked as it is
// delivered, framing kept. Raw relays (MCP) carry no text slots and pass as they are.
import { applyPolicy, requestPolicy } from '../../guardrails/policy-engine.js';
import { guardStream } from '../../guardrails/stream-guard.js';
import type { PipelineContext } from '../context.js';
import { reject } from '../stage.js';
import type { Stage, StageResult } from '../stage.js';

export const guardrailsOutStage: Stage = {
  name: 'guardrails-out',
  always: false,
  run(ctx: PipelineContext): StageResult {
    const policy = requestPolicy(ctx);
    const reply = ctx.reply;
    if (policy === null || reply === undefined || reply.kind === 'raw') return undefined;
    const side = policy.output;
    // A JSON answer without text (embeddings, the model list) has nothing for output rules.
    if (reply.kind === 'json' && reply.texts.length === 0) return undefined;
    if (side.broken !== null) return reject('ZN_ERR_GUARDRAIL_BLOCKED', side.broken.message);
    if (side.rules.length === 0) return undefined;
    if (reply.kind === 'json') return applyPolicy(ctx, policy, 'output', reply.texts);
    guardStream(ctx, policy, reply);
    return undefined;
  },
};
