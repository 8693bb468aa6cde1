// Stage `rate-limit` — requests/min, tokens/min, concurrency per key and account (rate-limit/).
import { promptSectionTokens } from '../../billing/prompt-sections.js';
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const rateLimitStage: Stage = {
  name: 'rate-limit',
  always: false,
  run(ctx: PipelineContext): StageResult {
    // The prompt estimate so far counts the text guardrails read; the chat template's tokens around
    // each message, tool definitions, schemas, images and documents are prompt too (the upstream
    // counts and bills them as input): added here, before
    // the tokens/min charge, so it and the credit reservation (preauthorise) and a usage estimate
    // made later (meter) all cover them. Cheap without them (billing/prompt-sections.ts).
    ctx.estimatedInputTokens += promptSectionTokens(ctx);
    return ctx.deps.limiter.admit(ctx);
  },
};
