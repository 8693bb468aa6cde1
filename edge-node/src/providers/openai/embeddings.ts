// The `embeddings` API (owner: pipeline-core). Stub: refuses until implemented.
import type { PipelineContext } from '../../pipeline/context.js';
import { reject } from '../../pipeline/stage.js';
import type { StageResult } from '../../pipeline/stage.js';
import type { ApiHandler } from '../api-handler.js';

export const embeddingsApi: ApiHandler = {
  api: 'embeddings',
  surface: 'model',
  identify(ctx: PipelineContext): StageResult {
    void ctx;
    return reject('ZN_ERR_NOT_FOUND', 'Not implemented yet.');
  },
  route(ctx: PipelineContext): StageResult {
    void ctx;
    return undefined;
  },
  async forward(ctx: PipelineContext): Promise<StageResult> {
    void ctx;
    return undefined;
  },
};
