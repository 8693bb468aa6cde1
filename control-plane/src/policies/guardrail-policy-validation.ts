/**
 * The guardrail policy bodies, create `{name, rules}` and replace `{rules}` (the name is in the
 * path): rules in the bundle's rule shape (proto/src/config-bundle.ts) with the cross-field rules
 * the bundle schema leaves to us: a regex
 * rule needs a pattern that compiles (a leading `(?i)` allowed, but not alone), can fire on a node
 * (it can match a character, and its first choice is not always an empty match), and has none of the
 * backtracking shapes proto/src/guardrail-regex-risk.ts refuses (nested quantifiers, overlapping
 * repeated alternatives, repetitions in a row over the same characters),
 * a keywords rule needs its keywords, each holding a visible character (one the node's matcher folds
 * to something: proto/src/keyword-fold.ts, the very fold the node compiles with), none listed twice,
 * and neither carries the other's field.
 */
import { z } from 'zod';
import { bodyObject, enumOf, newConfigNameSchema, text } from '../config/config-fields.js';
import { regexBacktrackingRisk, regexNeverFiresReason } from '../../../proto/src/index.js';
import { foldKeyword } from '../../../proto/src/keyword-fold.js';

export const GUARDRAIL_DETECTORS = ['regex', 'keywords', 'email', 'phone', 'prc-resident-id', 'bank-card', 'secret'] as const;
export const GUARDRAIL_ACTIONS = ['block', 'mask', 'flag'] as const;
export const GUARDRAIL_DIRECTIONS = ['input', 'output', 'both'] as const;
export const MAX_GUARDRAIL_RULES = 200;
const MAX_PATTERN_CHARS = 4096;
const MAX_KEYWORDS = 10_000;
const MAX_KEYWORD_CHARS = 256;

/** Nodes read a leading `(?i)` as "case-insensitive" (JavaScript has no inline flags). */
const CASE_INSENSITIVE_PREFIX = '(?i)';

/** Why a regex rule's pattern is refused, or null when every node can run it safely. */
function patternProblem(pattern: string): string | null {
  const ignoreCase = pattern.startsWith(CASE_INSENSITIVE_PREFIX);
  const source = ignoreCase ? pattern.slice(CASE_INSENSITIVE_PREFIX.length) : pattern;
  // `(?i)` alone leaves an empty regex, whose only matches (empty ones) nodes skip: a rule that never
  // fires. (An empty pattern itself is refused by the field's own rule, with these words.)
  if (ignoreCase && source.length === 0) return 'must not be empty';
  try {
    // The u flag is the stricter grammar: a pattern valid with it is valid for every node.
    new RegExp(source, 'u');
  } catch {
    return 'must be a valid JavaScript regular expression (u flag), optionally prefixed with (?i)';
  }
  const risk = regexBacktrackingRisk(source, { ignoreCase });
  if (risk !== null) return `is refused: ${risk}`;
  // An empty pattern is refused by the field's own rule, in those words.
  return source.length === 0 ? null : regexNeverFiresReason(source, { ignoreCase });
}

/**
 * A keyword as the node's matcher compares it, near enough to catch a repeat: compatibility forms
 * (full-width, ligatures) and precomposed/decomposed accents alike (NFKC), invisible characters
 * dropped, lower case. Two keywords alike here are alike on the node too, which folds further
 * (proto/src/keyword-fold.ts, read by edge-node/src/guardrails/detectors/keywords.ts).
 */
const keywordKey = (keyword: string): string =>
  keyword.normalize('NFKC').replace(/\p{Default_Ignorable_Code_Point}/gu, '').toLowerCase();

/** The first keyword that repeats an earlier one as the node reads them: [earlier index, index], or undefined. */
function repeatedKeyword(keywords: readonly string[]): [number, number] | undefined {
  const seen = new Map<string, number>();
  for (const [index, keyword] of keywords.entries()) {
    const key = keywordKey(keyword);
    // A keyword with nothing left is another matter (it matches nothing: refused on its own), not a repeat.
    if (key === '' || foldKeyword(keyword).length === 0) continue;
    const earlier = seen.get(key);
    if (earlier !== undefined) return [earlier, index];
    seen.set(key, index);
  }
  return undefined;
}

const ruleSchema = z.strictObject({
  detector: enumOf(GUARDRAIL_DETECTORS),
  pattern: text().min(1, { error: () => 'must not be empty' })
    .max(MAX_PATTERN_CHARS, { error: () => `must be at most ${MAX_PATTERN_CHARS} characters` }).optional(),
  keywords: z.array(
    text().min(1, { error: () => 'must not be empty' }).max(MAX_KEYWORD_CHARS, { error: () => `must be at most ${MAX_KEYWORD_CHARS} characters` }),
    { error: () => 'must be an array of strings' },
  ).min(1, { error: () => 'must list at least one keyword' }).max(MAX_KEYWORDS, { error: () => `must list at most ${MAX_KEYWORDS} keywords` }).optional(),
  action: enumOf(GUARDRAIL_ACTIONS),
  on: enumOf(GUARDRAIL_DIRECTIONS),
}, { error: (issue) => (issue.code === 'invalid_type' ? 'must be an object' : undefined) }).check((ctx) => {
  const rule = ctx.value;
  const issue = (path: string, message: string): void => {
    ctx.issues.push({ code: 'custom', input: rule, path: [path], message });
  };
  if (rule.detector === 'regex') {
    if (rule.pattern === undefined) issue('pattern', 'is required for the regex detector');
    else {
      const problem = patternProblem(rule.pattern);
      if (problem !== null) issue('pattern', problem);
    }
  } else if (rule.pattern !== undefined) {
    issue('pattern', 'is only for the regex detector');
  }
  if (rule.detector === 'keywords') {
    if (rule.keywords === undefined) issue('keywords', 'is required for the keywords detector');
    else {
      // A keyword made only of invisible characters and decorative marks folds to nothing on the
      // node, which skips it: a rule that could never fire, refused as an impossible regex is.
      for (const [index, keyword] of rule.keywords.entries()) {
        if (foldKeyword(keyword).length === 0) {
          ctx.issues.push({ code: 'custom', input: rule, path: ['keywords', index], message: 'must hold a visible character' });
        }
      }
      const repeat = repeatedKeyword(rule.keywords);
      if (repeat !== undefined) {
        const [earlier, index] = repeat;
        const same = rule.keywords[earlier] === rule.keywords[index] ? '' : ' (case, width, accents written either way and invisible characters do not count)';
        issue('keywords', `must not list a keyword twice: keywords[${index}] repeats keywords[${earlier}]${same}`);
      }
    }
  } else if (rule.keywords !== undefined) {
    issue('keywords', 'is only for the keywords detector');
  }
});

const rulesSchema = z.array(ruleSchema, { error: (issue) => (issue.input === undefined ? 'is required' : 'must be an array') })
  .max(MAX_GUARDRAIL_RULES, { error: () => `must hold at most ${MAX_GUARDRAIL_RULES} rules` });

export const guardrailPolicyCreateSchema = bodyObject({ name: newConfigNameSchema, rules: rulesSchema });
/** The replace body: the create's without name (it is in the path). */
export const guardrailPolicyReplaceSchema = bodyObject({ rules: rulesSchema });

export type GuardrailPolicyInput = z.output<typeof guardrailPolicyCreateSchema>;
export type GuardrailPolicySpec = z.output<typeof guardrailPolicyReplaceSchema>;
export type GuardrailRule = GuardrailPolicyInput['rules'][number];
