/**
 * Route schemas are zod schemas: fastify validates params, querystring, headers and body with them
 * (a failure is ZN_ERR_CP_INVALID_REQUEST naming the field), and response schemas strip anything
 * a handler returns beyond what the schema declares, so internals cannot leak by accident.
 * Use `app.withTypeProvider<ZodTypeProvider>()` to get typed `request.body` etc.
 */
import type { FastifySchemaCompiler, FastifySerializerCompiler, FastifyTypeProvider } from 'fastify';
import { z } from 'zod';
import { zenovaError } from '../errors.js';

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

/** "body field 'model': expected string, received number" — the field path and zod's reason. */
export function describeIssues(part: string, issues: readonly z.core.$ZodIssue[]): string {
  const described = issues.slice(0, MAX_REPORTED_ISSUES).map((issue) => {
    const field = issue.path.map(String).join('.');
    return field ? `${part} field '${field}': ${issue.message}` : `${part}: ${issue.message}`;
  });
  if (issues.length > MAX_REPORTED_ISSUES) described.push(`and ${issues.length - MAX_REPORTED_ISSUES} more`);
  return described.join('; ');
}

export const zodValidatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, method, url, httpPart }) => {
  const zodSchema = asZodSchema(schema, `${method} ${url} ${httpPart ?? ''}`);
  const part = httpPart === 'querystring' ? 'query' : (httpPart ?? 'request');
  return (data: unknown) => {
    const result = zodSchema.safeParse(data);
    if (result.success) return { value: result.data };
    return { error: zenovaError('ZN_ERR_CP_INVALID_REQUEST', describeIssues(part, result.error.issues)) };
  };
};

export const zodSerializerCompiler: FastifySerializerCompiler<unknown> = ({ schema, method, url, httpStatus }) => {
  const zodSchema = asZodSchema(schema, `${method} ${url} response ${httpStatus ?? ''}`);
  return (data: unknown) => JSON.stringify(zodSchema.parse(data));
};
