// Stage `guardrails-in` — input rules of the key's policy: block / mask / flag.
// Owner: guardrails. Stub until then: continues.
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const guardrailsInStage: Stage = {
  name: 'guardrails-in',
  always: false,
  run(ctx: PipelineContext): StageResult {
    void ctx;
    return undefined;
  },
};
