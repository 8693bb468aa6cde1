/**
 * Route schemas are zod schemas: fastify validates params, querystring, headers and body with them
 * (a failure is ZN_ERR_CP_INVALID_REQUEST naming the field), and response schemas strip anything
 * a handler returns beyond what the schema declares, so internals cannot leak by accident.
 * Use `app.withTypeProvider<ZodTypeProvider>()` to get typed `request.body` etc.
 */
import type { FastifySchemaCompiler, FastifySerializerCompiler, FastifyTypeProvider } from 'fastify';
import { z } from 'zod';
import { MAX_REPORTED_KEYS, describeConfigIssues, shownFieldName } from '../config/config-fields.js';
import { zenovaError } from '../errors.js';
import type { ZenovaError } from '../errors.js';

export interface ZodTypeProvider extends FastifyTypeProvider {
  validator: this['schema'] extends z.ZodType ? z.output<this['schema']> : unknown;
  serializer: this['schema'] extends z.ZodType ? z.input<this['schema']> : unknown;
}

const MAX_REPORTED_ISSUES = 5;

function asZodSchema(schema: unknown, where: string): z.ZodType {
  if (schema instanceof z.ZodType) return schema;
  // One way of validating: a JSON schema here would silently bypass our error mapping.
  throw new Error(`${where}: route schemas must be zod schemas`);
}

const JSON_TYPE_WORDS: Readonly<Record<string, string>> = {
  string: 'must be a string',
  number: 'must be a number',
  int: 'must be an integer',
  bigint: 'must be an integer',
  boolean: 'must be true or false',
  object: 'must be an object',
  array: 'must be an array',
  null: 'must be null',
};

/**
 * The admin API's words for what a schema states no rule of its own for (config-fields.ts's
 * `text()`, `bodyObject`): "is required" for a missing field, "must be a string" and the like for
 * another JSON type, "must be a JSON object" for a body that is not one; undefined leaves zod's
 * own (a schema's stated rule always wins over this map). Route body schemas are parsed with it,
 * so the console login and enrollment refuse in the words the admin API uses.
 */
export const adminErrorMap: z.core.$ZodErrorMap = (issue) => {
  if (issue.code !== 'invalid_type') return undefined;
  if (issue.input === undefined) return issue.path === undefined || issue.path.length === 0 ? 'must be a JSON object' : 'is required';
  if (issue.expected === 'object' && (issue.path === undefined || issue.path.length === 0)) return 'must be a JSON object';
  return JSON_TYPE_WORDS[issue.expected];
};

/** "body field 'model': must be a string" — the field path and the rule it breaks. */
export function describeIssues(part: string, issues: readonly z.core.$ZodIssue[]): string {
  // One rule can fail twice on one value (1e300 is neither an integer nor at most the maximum):
  // the caller needs each reason once.
  const described = [...new Set(issues.slice(0, MAX_REPORTED_ISSUES).map((issue) => {
    const field = issue.path.map((segment) => (typeof segment === 'number' ? String(segment) : shownFieldName(String(segment)))).join('.');
    // A body's unknown fields as the admin API names them (config-fields.ts: `x: unknown field`),
    // each its own field; the query keeps its documented "Unrecognized key" wording.
    if (issue.code === 'unrecognized_keys' && part === 'body') return unknownBodyFieldsMessage(field, issue.keys);
    const message = issue.code === 'unrecognized_keys' ? unknownKeysMessage(issue.keys) : issue.message;
    return field ? `${part} field '${field}': ${message}` : `${part}: ${message}`;
  }))];
  if (issues.length > MAX_REPORTED_ISSUES) described.push(`and ${issues.length - MAX_REPORTED_ISSUES} more`);
  return described.join('; ');
}

/** zod's "Unrecognized keys: …" with each name as shownFieldName quotes it (a pasted secret is not echoed), at most MAX_REPORTED_KEYS. */
function unknownKeysMessage(keys: readonly string[]): string {
  const named = keys.slice(0, MAX_REPORTED_KEYS).map((key) => (shownFieldName(key) === key ? `"${key}"` : shownFieldName(key)));
  const more = keys.length > MAX_REPORTED_KEYS ? ` and ${keys.length - MAX_REPORTED_KEYS} more` : '';
  return `Unrecognized key${keys.length === 1 ? '' : 's'}: ${named.join(', ')}${more}`;
}

/** "body field 'bogus': unknown field; body field 'facts.extra': unknown field", each name as shownFieldName quotes it, at most MAX_REPORTED_KEYS. */
function unknownBodyFieldsMessage(field: string, keys: readonly string[]): string {
  const named = keys.slice(0, MAX_REPORTED_KEYS).map((key) => `body field '${field ? `${field}.` : ''}${shownFieldName(key)}': unknown field`);
  if (keys.length > MAX_REPORTED_KEYS) named.push(`and ${keys.length - MAX_REPORTED_KEYS} more unknown fields`);
  return named.join('; ');
}

export const zodValidatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, method, url, httpPart }) => {
  const zodSchema = asZodSchema(schema, `${method} ${url} ${httpPart ?? ''}`);
  const part = httpPart === 'querystring' ? 'query' : (httpPart ?? 'request');
  // A path segment is reported as `name: rule`, the shape a body field's rejection has, since the
  // path's name is the same field the body names on create.
  const describe = httpPart === 'params' ? describeConfigIssues : (issues: readonly z.core.$ZodIssue[]) => describeIssues(part, issues);
  return (data: unknown) => {
    // A body in the admin API's words; params, query and headers keep the wording their tests and
    // docs state.
    const result = httpPart === 'body' ? zodSchema.safeParse(data, { error: adminErrorMap }) : zodSchema.safeParse(data);
    if (result.success) return { value: result.data };
    // The zod error as cause: the error handler names its first field as the body's `param`.
    return { error: zenovaError('ZN_ERR_CP_INVALID_REQUEST', describe(result.error.issues), { cause: result.error }) };
  };
};

// Both PostgreSQL's timestamptz and JavaScript's Date hold every instant of years 1..9999 (four-digit
// years, as ISO 8601 has them by default); outside them a time is a typo, or a 500 from PostgreSQL.
const MIN_INSTANT_MS = Date.parse('0001-01-01T00:00:00Z');
const MAX_INSTANT_MS = Date.parse('9999-12-31T23:59:59.999Z');
const INSTANT_RULE = 'must be unix ms or an ISO 8601 date-time with a time zone (such as 2026-03-07T00:00:00Z), from year 1 to 9999';
// Records and the ledger keep milliseconds: cut to its millisecond, a finer time would move a bound
// past the records at that millisecond and refuse a window whose bounds differ below it.
export const MILLISECOND_RULE = 'must have at most 3 fractional digits (such as 2026-03-07T00:00:00.123Z): times are kept to the millisecond';
export const FINER_THAN_MS = /T\d{2}:\d{2}:\d{2}\.\d{4,}(?:Z|[+-]\d{2}:\d{2})$/;
// A `+` in a query string is a space once decoded (application/x-www-form-urlencoded): a `+08:00`
// sent as is arrives as ` 08:00`, and the caller's time looks fine to them.
const PLUS_AS_SPACE = /T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)? \d{2}:?\d{2}$/;
const PLUS_AS_SPACE_RULE = "has a space before its offset: a '+' in a URL query is read as a space, so send +08:00 as %2B08:00";
const WINDOW_ORDER_RULE = "must be before 'to' (from is inclusive, to exclusive)";

/**
 * The query of a list that takes no parameters: an unknown one (a typo of a filter, or a filter
 * it does not have) is refused rather than ignored, which would answer with the whole list.
 */
export const noQuerySchema = z.strictObject({});

/** Whether epoch ms `ms`, its offset applied, lies within years 1..9999 UTC. */
export const isInstantInRange = (ms: number): boolean => Number.isFinite(ms) && ms >= MIN_INSTANT_MS && ms <= MAX_INSTANT_MS;

/** A query time: unix ms or an ISO 8601 date-time with offset (to the millisecond), as epoch ms within [year 1, year 9999]. */
export const instantSchema = z
  .string({ error: () => INSTANT_RULE })
  .refine((s) => !PLUS_AS_SPACE.test(s), { error: () => PLUS_AS_SPACE_RULE, abort: true })
  .refine((s) => !FINER_THAN_MS.test(s), { error: () => MILLISECOND_RULE, abort: true })
  .pipe(z.union([
    // Before 1970 too (negative, down to year 1), as the same instant written in ISO 8601 is.
    z.string().regex(/^-?\d{1,15}$/).transform(Number),
    z.iso.datetime({ offset: true }).transform((s) => Date.parse(s)),
  ], { error: () => INSTANT_RULE }))
  .refine(isInstantInRange, { error: () => INSTANT_RULE });

/**
 * A list's `limit` in the query: decimal digits only. z.coerce.number() took ' 1', '1e1' and
 * '0x10' as numbers and refused the rest in zod's words; one rule, stated once, is clearer.
 */
export function listLimitSchema(max: number, defaultLimit: number) {
  const rule = `must be a whole number from 1 to ${max}`;
  return z
    .string({ error: () => rule })
    .regex(/^[1-9]\d{0,9}$/, { error: () => rule })
    .transform(Number)
    .refine((n) => n <= max, { error: () => rule })
    .default(defaultLimit);
}

/**
 * A query window's order: `from` (inclusive) before `to` (exclusive) when both are given. A window
 * that holds no instant is a mistake (swapped bounds), not a question answered by an empty list.
 */
export function checkWindowOrder<T extends { from?: number | undefined; to?: number | undefined }>(ctx: z.core.ParsePayload<T>): void {
  const { from, to } = ctx.value;
  if (from !== undefined && to !== undefined && from >= to) {
    ctx.issues.push({ code: 'custom', input: ctx.value, path: ['from'], message: WINDOW_ORDER_RULE });
  }
}

/** The same refusal for a `from` not before a `to` the route filled in (now): never a backwards window. */
export function windowOrderError(): ZenovaError {
  // As checkWindowOrder's issue, so the body's `param` is 'from' here too.
  const issue: z.core.$ZodIssue = { code: 'custom', input: undefined, path: ['from'], message: WINDOW_ORDER_RULE };
  return zenovaError('ZN_ERR_CP_INVALID_REQUEST', `query field 'from': ${WINDOW_ORDER_RULE}`, { cause: new z.ZodError([issue]) });
}

export const zodSerializerCompiler: FastifySerializerCompiler<unknown> = ({ schema, method, url, httpStatus }) => {
  const zodSchema = asZodSchema(schema, `${method} ${url} response ${httpStatus ?? ''}`);
  return (data: unknown) => JSON.stringify(zodSchema.parse(data));
};
