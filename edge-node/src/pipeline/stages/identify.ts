// Stage `identify` — request id, API, body validation, model/stream/max tokens, input texts.
// Owner: pipeline-core. Stub until then: continues.
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const identifyStage: Stage = {
  name: 'identify',
  always: false,
  run(ctx: PipelineContext): StageResult {
    void ctx;
    return undefined;
  },
};
