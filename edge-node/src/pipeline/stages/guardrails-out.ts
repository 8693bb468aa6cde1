// Stage `guardrails-out` — output rules on the reply (streams too, framing kept).
// Owner: guardrails. Stub until then: continues.
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const guardrailsOutStage: Stage = {
  name: 'guardrails-out',
  always: false,
  run(ctx: PipelineContext): StageResult {
    void ctx;
    return undefined;
  },
};
