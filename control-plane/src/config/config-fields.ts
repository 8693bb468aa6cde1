/**
 * Field rules shared by the config admin API (accounts, keys, upstreams, routes, policies, prices)
 * and the parser that turns a zod failure into one 400 naming each field and its rule:
 * `targets[0].upstream: no upstream named 'x'`. Rule messages never quote the submitted value
 * (only names, where one is unknown or taken), so a rejected secret cannot come back in an error.
 */
import { z } from 'zod';
import { zenovaError } from '../errors.js';

/** Names of accounts, keys, upstreams, policies, and route aliases. */
export const CONFIG_NAME_PATTERN = /^[A-Za-z0-9._:/-]{1,128}$/;
export const CONFIG_NAME_RULE = 'must be 1 to 128 characters of letters, digits and . _ : / -';

// NUL and unpaired UTF-16 surrogates: a JavaScript string holds them, PostgreSQL text refuses
// them, and a query or insert carrying one failed as a 500. (records/storable-text.ts replaces them
// in records a node sends; what an operator sends is refused instead, so nothing is stored altered.)
// eslint-disable-next-line no-control-regex -- matching NUL is the point
const UNSTORABLE_CHAR = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
export const STORABLE_TEXT_RULE = 'must not contain NUL (U+0000) or unpaired UTF-16 surrogates';
export const isStorableText = (value: string): boolean => !UNSTORABLE_CHAR.test(value);

/** Characters as zod's string lengths and PostgreSQL's length() count them: code points, not UTF-16 units. */
export function codePointLength(text: string): number {
  let n = 0;
  for (const _ of text) n += 1;
  return n;
}

/**
 * A string field: "is required" when absent, "must be a string" for another type, and refused when
 * PostgreSQL could not store it. Every text field, path segment and query value goes through this.
 */
export const text = (): z.ZodString =>
  z.string({ error: (issue) => (issue.input === undefined ? 'is required' : 'must be a string') })
    // abort: the field's own rules (a pattern, a URL parse) would only add noise about the same value.
    .refine(isStorableText, { error: () => STORABLE_TEXT_RULE, abort: true });

/** Free text of 1..max characters: a query value or an id in a path, looked up as given. */
export const boundedText = (max: number): z.ZodString =>
  text().min(1, { error: () => 'must not be empty' }).max(max, { error: () => `must be at most ${max} characters` });

export const configNameSchema = text().regex(CONFIG_NAME_PATTERN, { error: () => CONFIG_NAME_RULE });

/**
 * `.` and `..` follow the name rule but are dot segments: fetch, curl and browsers resolve them
 * away (`%2E%2E` too) before sending, so a thing so named could not be reached by its path.
 */
export const DOT_SEGMENT_NAME_RULE = "must not be '.' or '..' (URL clients drop them from a path)";
export const isDotSegmentName = (value: string): boolean => value === '.' || value === '..';

/**
 * The name a create gives a thing addressed by it in paths. References keep configNameSchema, so a
 * thing named before this rule stays readable and usable.
 */
export const newConfigNameSchema = configNameSchema.refine((value) => !isDotSegmentName(value), { error: () => DOT_SEGMENT_NAME_RULE });

/**
 * A path segment that names a thing: it must follow the thing's name rule, so a name that cannot
 * exist is a 400 naming the field and the rule (docs/api.md), and only a valid name is looked up
 * (a miss is the thing's 404).
 */
export const nameParam = (pattern: RegExp = CONFIG_NAME_PATTERN, rule: string = CONFIG_NAME_RULE): z.ZodString =>
  text().regex(pattern, { error: () => rule });

/** An integer in [min, max]; floats, strings and out-of-range numbers all get the one rule. */
export function integerIn(min: number, max: number): z.ZodNumber {
  const rule = `must be an integer from ${min} to ${max}`;
  return z.number({ error: () => rule }).int({ error: () => rule }).min(min, { error: () => rule }).max(max, { error: () => rule });
}

export function enumOf<const T extends readonly [string, ...string[]]>(values: T): z.ZodEnum<{ [K in T[number]]: K }> {
  return z.enum(values, { error: () => `must be one of ${values.join(', ')}` });
}

/** A strict JSON object body; unknown fields are refused by name. */
export function bodyObject<S extends z.core.$ZodLooseShape>(shape: S): z.ZodObject<S, z.core.$strict> {
  return z.strictObject(shape, { error: (issue) => (issue.code === 'invalid_type' ? 'must be a JSON object' : undefined) });
}

/** `targets[0].upstream` for the path ['targets', 0, 'upstream']. */
export function fieldPath(path: readonly PropertyKey[]): string {
  return path.map((part, i) => (typeof part === 'number' ? `[${part}]` : `${i === 0 ? '' : '.'}${shownFieldName(String(part))}`)).join('');
}

/**
 * A field name as an error (and its log line) may quote it: a name shaped like a field's (a letter
 * or _, then up to 31 letters, digits or _: every field of the API), or else
 * only its length. A caller who pasted a secret where a name goes (`{"sk-proj-…": …}`) must not get
 * it back in the answer and the log, and a 200 000-character key must not make a 200 kB answer.
 */
export function shownFieldName(name: string): string {
  return /^[A-Za-z_][A-Za-z0-9_]{0,31}$/.test(name) ? name : `(a field name of ${name.length} characters, not shown)`;
}

const MAX_REPORTED_ISSUES = 5;
/** Unknown fields named per object; the rest counted. */
export const MAX_REPORTED_KEYS = 5;

/** "name: must be …; targets[0].weight: must be …" — each issue as `field: rule`. */
export function describeConfigIssues(issues: readonly z.core.$ZodIssue[]): string {
  // A Set: one rule can fail twice on one value (1e300 is neither an integer nor at most the maximum).
  const described = [...new Set(issues.slice(0, MAX_REPORTED_ISSUES).map((issue) => {
    const field = fieldPath(issue.path);
    if (issue.code === 'unrecognized_keys') {
      const named = issue.keys.slice(0, MAX_REPORTED_KEYS).map((key) => `${field === '' ? shownFieldName(key) : `${field}.${shownFieldName(key)}`}: unknown field`);
      if (issue.keys.length > MAX_REPORTED_KEYS) named.push(`and ${issue.keys.length - MAX_REPORTED_KEYS} more unknown fields`);
      return named.join('; ');
    }
    return `${field === '' ? 'body' : field}: ${issue.message}`;
  }))];
  if (issues.length > MAX_REPORTED_ISSUES) described.push(`and ${issues.length - MAX_REPORTED_ISSUES} more`);
  return described.join('; ');
}

/** Parses with `schema` or throws ZN_ERR_CP_INVALID_REQUEST naming each field and rule. */
export function parseConfigInput<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  const result = schema.safeParse(body);
  // The zod error as cause: the error handler names its first field as the body's `param`.
  if (!result.success) throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', describeConfigIssues(result.error.issues), { cause: result.error });
  return result.data;
}

const noFields = bodyObject({});

/**
 * For routes that take no body (deletes, revokes, node commands): none or `{}` passes; any field
 * is a 400 naming it. Ignoring it let `{"ttlSeconds": 60}` answer 200 with the default applied.
 */
export function refuseBodyFields(body: unknown): void {
  if (body !== undefined) parseConfigInput(noFields, body);
}

/** A 400 for one field whose value is well-formed but refers to something that does not exist. */
export function invalidField(field: string, rule: string): Error {
  return zenovaError('ZN_ERR_CP_INVALID_REQUEST', `${field}: ${rule}`);
}

/**
 * One 400 listing every problem as `field: rule`; nothing when there is none. Stores check every
 * reference before refusing, so the operator fixes a body once, not once per unknown name.
 */
export function throwProblems(problems: ReadonlyArray<{ field: string; rule: string }>): void {
  const first = problems[0];
  if (first === undefined) return;
  const rest = problems.slice(1).map((p) => `; ${p.field}: ${p.rule}`).join('');
  throw invalidField(first.field, `${first.rule}${rest}`);
}
