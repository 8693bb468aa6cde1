/**
 * A guardrail policy from the bundle, compiled once: each rule's detector built (keyword automata,
 * regexes), split by direction. Cached per policy object (the config snapshot's), so the hot path
 * compiles nothing. A new config brings new objects, so each rule's detector is also kept in a
 * bounded module-level cache keyed by what builds it (detector kind and pattern or keywords): a
 * policy unchanged by a config swap costs no recompile (a regex's safety check can take
 * milliseconds, a keyword automaton longer).
 *
 * A rule the node cannot apply (a regex that does not compile or is missing, a keyword rule with no
 * list) makes its direction fail closed: every request under the policy is blocked there, and one
 * error line per policy says why. Passing traffic a policy was meant to check would be worse.
 */
import type { GuardrailPolicy, GuardrailRule } from '../../../proto/src/index.js';
import type { Logger } from '../logger.js';
import { bankCardDetector } from './detectors/bank-card.js';
import type { Detector, DetectorName } from './detectors/detector.js';
import { emailDetector } from './detectors/email.js';
import { keywordsDetector } from './detectors/keywords.js';
import { phoneDetector } from './detectors/phone.js';
import { prcResidentIdDetector } from './detectors/prc-resident-id.js';
import { compileRegex } from './detectors/regex.js';
import { secretDetector } from './detectors/secret.js';

export type Direction = 'input' | 'output';
export type GuardrailAction = GuardrailRule['action'];

export interface CompiledRule {
  /** The rule's index in the policy (what verdicts name). */
  readonly index: number;
  readonly detector: Detector;
  readonly action: GuardrailAction;
}

/** Why a direction fails closed, in words fit for the caller (no pattern, no matched text). */
export interface BrokenRule {
  readonly message: string;
}

/** The rules of one direction. */
export interface PolicySide {
  readonly rules: readonly CompiledRule[];
  /** The first rule of this direction the node cannot apply: the direction blocks everything. */
  readonly broken: BrokenRule | null;
  /** The largest detector window of the rules (what a stream guard holds back). */
  readonly window: number;
}

export interface CompiledPolicy {
  readonly id: string;
  readonly input: PolicySide;
  readonly output: PolicySide;
}

const BUILT_IN: Partial<Record<DetectorName, Detector>> = {
  email: emailDetector,
  phone: phoneDetector,
  'prc-resident-id': prcResidentIdDetector,
  'bank-card': bankCardDetector,
  secret: secretDetector,
};

const compiled = new WeakMap<GuardrailPolicy, CompiledPolicy>();

/** Rules' detectors (or why one cannot be built), least recently used first. */
const detectors = new Map<string, Detector | string>();
/** Bounds of that cache: entries, and characters of the keys (patterns and keyword lists). */
const MAX_CACHED_DETECTORS = 2048;
const MAX_CACHED_CHARS = 16 * 1024 * 1024;
let cachedChars = 0;

/** What builds a rule's detector; undefined for built-ins, which need no building. */
function detectorKey(rule: GuardrailRule): string | undefined {
  if (rule.detector === 'regex') return `regex\u0000${rule.pattern ?? ''}`;
  if (rule.detector === 'keywords' && rule.keywords !== undefined) return `keywords\u0000${JSON.stringify(rule.keywords)}`;
  return undefined;
}

function cachedDetectorOf(rule: GuardrailRule): Detector | string {
  const key = detectorKey(rule);
  if (key === undefined) return detectorOf(rule);
  const hit = detectors.get(key);
  if (hit !== undefined) {
    detectors.delete(key);
    detectors.set(key, hit);
    return hit;
  }
  const built = detectorOf(rule);
  detectors.set(key, built);
  cachedChars += key.length;
  for (const oldest of detectors.keys()) {
    if (detectors.size <= MAX_CACHED_DETECTORS && cachedChars <= MAX_CACHED_CHARS) break;
    detectors.delete(oldest);
    cachedChars -= oldest.length;
  }
  return built;
}

function detectorOf(rule: GuardrailRule): Detector | string {
  if (rule.detector === 'regex') {
    const re = compileRegex(rule.pattern);
    return re.ok ? re.detector : re.reason;
  }
  if (rule.detector === 'keywords') return rule.keywords === undefined ? 'the rule has no keyword list' : keywordsDetector(rule.keywords);
  return BUILT_IN[rule.detector] ?? `unknown detector "${rule.detector}"`;
}

function side(rules: CompiledRule[], broken: BrokenRule | null): PolicySide {
  return { rules, broken, window: rules.reduce((n, r) => Math.max(n, r.detector.window), 0) };
}

/** The compiled form of `policy` (compiled on first use, then cached). */
export function compilePolicy(policy: GuardrailPolicy, logger?: Logger): CompiledPolicy {
  const cached = compiled.get(policy);
  if (cached !== undefined) return cached;
  const input: CompiledRule[] = [];
  const output: CompiledRule[] = [];
  let brokenIn: BrokenRule | null = null;
  let brokenOut: BrokenRule | null = null;
  policy.rules.forEach((rule, index) => {
    const detector = cachedDetectorOf(rule);
    const onInput = rule.on !== 'output';
    const onOutput = rule.on !== 'input';
    if (typeof detector === 'string') {
      const broken = { message: `Guardrail policy "${policy.id}" rule ${index} (${rule.detector}) cannot be applied on this node, so the request is blocked.` };
      if (onInput) brokenIn ??= broken;
      if (onOutput) brokenOut ??= broken;
      // The pattern is operator config, not caller text; the reason helps fix it.
      logger?.error(
        { policyId: policy.id, rule: index, detector: rule.detector, reason: detector },
        'guardrail policy rule cannot be applied; requests under this policy are blocked (fail closed) until it is fixed',
      );
      return;
    }
    const compiledRule: CompiledRule = { index, detector, action: rule.action };
    if (onInput) input.push(compiledRule);
    if (onOutput) output.push(compiledRule);
  });
  const result: CompiledPolicy = { id: policy.id, input: side(input, brokenIn), output: side(output, brokenOut) };
  compiled.set(policy, result);
  return result;
}

/** The policy a key names but the config does not carry: both directions fail closed. */
export function missingPolicy(id: string): CompiledPolicy {
  const broken: BrokenRule = { message: `Guardrail policy "${id}" is not in this node's config, so the request is blocked.` };
  return { id, input: side([], broken), output: side([], broken) };
}
