/**
 * The request pipeline, in order. This list is the only place the order lives (DESIGN §5):
 * identify → authenticate → surface → rate-limit → guardrails-in → preauthorise → route → forward
 * → guardrails-out → meter → settle → spool. The first nine stop at the first rejection; the
 * `always` stages (meter, settle, spool) run for every request, rejected and failed ones too.
 */
import type { Stage } from './stage.js';
import { authenticateStage } from './stages/authenticate.js';
import { forwardStage } from './stages/forward.js';
import { guardrailsInStage } from './stages/guardrails-in.js';
import { guardrailsOutStage } from './stages/guardrails-out.js';
import { identifyStage } from './stages/identify.js';
import { meterStage } from './stages/meter.js';
import { preauthoriseStage } from './stages/preauthorise.js';
import { rateLimitStage } from './stages/rate-limit.js';
import { routeStage } from './stages/route.js';
import { settleStage } from './stages/settle.js';
import { spoolStage } from './stages/spool.js';
import { surfaceStage } from './stages/surface.js';

export const PIPELINE: readonly Stage[] = [
  identifyStage,
  authenticateStage,
  surfaceStage,
  rateLimitStage,
  guardrailsInStage,
  preauthoriseStage,
  routeStage,
  forwardStage,
  guardrailsOutStage,
  meterStage,
  settleStage,
  spoolStage,
];
