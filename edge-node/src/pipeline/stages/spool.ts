// Stage `spool` — the final record, durable before the caller's last byte.
// Owner: spool. Stub until then: continues.
import type { PipelineContext } from '../context.js';
import type { Stage, StageResult } from '../stage.js';

export const spoolStage: Stage = {
  name: 'spool',
  always: true,
  run(ctx: PipelineContext): StageResult {
    void ctx;
    return undefined;
  },
};
