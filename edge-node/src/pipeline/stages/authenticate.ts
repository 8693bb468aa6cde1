// Stage `authenticate` — the caller's key from the bundle's hashes.
// Owner: pipeline-core. Stub until then: continues.
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const authenticateStage: Stage = {
  name: 'authenticate',
  always: false,
  run(ctx: PipelineContext): StageResult {
    void ctx;
    return undefined;
  },
};
