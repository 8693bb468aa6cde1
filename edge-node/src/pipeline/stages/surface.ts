// Stage `surface` — the node serves this surface (model / tools).
// Owner: pipeline-core. Stub until then: continues.
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const surfaceStage: Stage = {
  name: 'surface',
  always: false,
  run(ctx: PipelineContext): StageResult {
    void ctx;
    return undefined;
  },
};
