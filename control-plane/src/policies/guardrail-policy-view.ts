/** What the admin API shows of a guardrail policy; the zod schema is the response schema. */
import { z } from 'zod';
import { etagOf } from '../http/if-match.js';
import { GUARDRAIL_ACTIONS, GUARDRAIL_DETECTORS, GUARDRAIL_DIRECTIONS } from './guardrail-policy-validation.js';
import type { GuardrailRule } from './guardrail-policy-validation.js';

export const guardrailPolicyViewSchema = z.object({
  id: z.string(),
  name: z.string(),
  rules: z.array(z.object({
    detector: z.enum(GUARDRAIL_DETECTORS),
    pattern: z.string().optional(),
    keywords: z.array(z.string()).optional(),
    action: z.enum(GUARDRAIL_ACTIONS),
    on: z.enum(GUARDRAIL_DIRECTIONS),
  })),
  createdAt: z.string(),
});

export type GuardrailPolicyView = z.infer<typeof guardrailPolicyViewSchema>;

export interface GuardrailPolicyRow {
  id: string;
  name: string;
  rules: GuardrailRule[];
  createdAt: Date;
}

export function toGuardrailPolicyView(row: GuardrailPolicyRow): GuardrailPolicyView {
  return { id: row.id, name: row.name, rules: row.rules, createdAt: row.createdAt.toISOString() };
}

/** The policy's ETag (http/if-match.ts): a hash of its view, which is all it stores. */
export function guardrailPolicyEtag(row: GuardrailPolicyRow): string {
  return etagOf({ guardrailPolicy: toGuardrailPolicyView(row) });
}
