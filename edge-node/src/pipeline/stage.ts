/**
 * A pipeline stage: one file under stages/, `run(ctx)` returning undefined to continue or a
 * Rejection to stop. A stage never calls another; the order is stages.ts alone.
 */
import type { ErrorCode } from '../errors.js';
import { zenovaError } from '../errors.js';
import type { ZenovaError, ZenovaErrorOverrides } from '../errors.js';
import type { PipelineContext } from './context.js';

export type StageName =
  | 'identify'
  | 'authenticate'
  | 'surface'
  | 'rate-limit'
  | 'guardrails-in'
  | 'preauthorise'
  | 'route'
  | 'forward'
  | 'guardrails-out'
  | 'meter'
  | 'settle'
  | 'spool';

export interface Rejection {
  readonly kind: 'rejection';
  readonly error: ZenovaError;
}

export type StageResult = Rejection | undefined;

export interface Stage {
  readonly name: StageName;
  /** Tail stages run for every request, rejected and failed ones too, after the answer is known. */
  readonly always: boolean;
  run(ctx: PipelineContext): StageResult | Promise<StageResult>;
}

export function reject(code: ErrorCode, message?: string, overrides?: ZenovaErrorOverrides): Rejection {
  return { kind: 'rejection', error: zenovaError(code, message, overrides) };
}

export function rejectWith(error: ZenovaError): Rejection {
  return { kind: 'rejection', error };
}
