// The local JSON config file of a stand-alone node (`serve --config`, no control plane). Enrolled
// nodes take signed bundles instead; both become one RuntimeConfig (runtime-config.ts), which is
// all the serving code sees.
import { z } from 'zod';
import { readRegularFileWithin } from '../../../proto/src/bounded-regular-file.js';
import type { BoundedFileRefusal } from '../../../proto/src/bounded-regular-file.js';
import { describeIssues } from '../zod-issues.js';

const MAX_CONFIG_FILE_BYTES = 1024 * 1024;
export const DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024;
export const DEFAULT_UPSTREAM_TIMEOUT_MS = 60_000;

const name = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'use letters, digits, ".", "_" and "-"');

const baseUrl = z
  .url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' })
  .refine((value) => {
    // Runs even when the URL check above failed, hence the guard.
    if (!URL.canParse(value)) return true;
    const url = new URL(value);
    return url.username === '' && url.password === '' && url.search === '' && url.hash === '';
  }, 'must not carry credentials, a query or a fragment (put the key in apiKey)');

const upstreamSchema = z.strictObject({
  name,
  kind: z.literal('openai-compatible'),
  /** The upstream's /v1 base, e.g. https://api.example.com/v1. */
  baseUrl,
  // A pasted key often carries a trailing newline: trimmed. What is left is sent as a header value,
  // so only printable ASCII can be one (else every call of the alias fails inside the node).
  apiKey: z
    .string()
    .transform((value) => value.trim())
    .pipe(z.string().min(1).max(4096).regex(/^[\x21-\x7e]+$/, 'must be printable ASCII without spaces (the key is sent as a header value)'))
    .optional(),
  timeoutMs: z.number().int().positive().max(3_600_000).optional(),
});

const modelSchema = z.strictObject({
  /** The alias callers put in `model`. */
  id: z.string().min(1).max(256),
  upstream: name,
  upstreamModel: z.string().min(1).max(256),
});

const apiKeySchema = z.strictObject({
  id: name,
  /** Lower- or upper-case hex SHA-256 of the key; the key itself never reaches the node. */
  sha256: z.string().regex(/^[0-9a-fA-F]{64}$/, 'must be 64 hex characters (SHA-256 of the key)'),
  name: z.string().max(256).optional(),
});

export const localConfigSchema = z
  .strictObject({
    node: z.strictObject({ name: name.optional() }).optional(),
    upstreams: z.array(upstreamSchema).min(1),
    models: z.array(modelSchema),
    apiKeys: z.array(apiKeySchema).optional(),
    limits: z
      .strictObject({ maxBodyBytes: z.number().int().positive().max(256 * 1024 * 1024).optional() })
      .optional(),
  })
  .superRefine((config, ctx) => {
    const unique = (items: Array<{ key: string; path: PropertyKey[] }>, what: string): void => {
      const seen = new Set<string>();
      for (const item of items) {
        if (seen.has(item.key)) ctx.addIssue({ code: 'custom', path: item.path, message: `duplicate ${what} "${item.key}"` });
        seen.add(item.key);
      }
    };
    unique(config.upstreams.map((u, i) => ({ key: u.name, path: ['upstreams', i, 'name'] })), 'upstream name');
    unique(config.models.map((m, i) => ({ key: m.id, path: ['models', i, 'id'] })), 'model id');
    unique((config.apiKeys ?? []).map((k, i) => ({ key: k.id, path: ['apiKeys', i, 'id'] })), 'API key id');
    unique((config.apiKeys ?? []).map((k, i) => ({ key: k.sha256.toLowerCase(), path: ['apiKeys', i, 'sha256'] })), 'API key hash');
    const known = new Set(config.upstreams.map((u) => u.name));
    config.models.forEach((m, i) => {
      if (!known.has(m.upstream)) {
        ctx.addIssue({
          code: 'custom',
          path: ['models', i, 'upstream'],
          message: `unknown upstream "${m.upstream}" (known: ${[...known].join(', ')})`,
        });
      }
    });
  });

export type LocalConfig = z.infer<typeof localConfigSchema>;
export type UpstreamConfig = LocalConfig['upstreams'][number];
export type ModelConfig = LocalConfig['models'][number];
export type ApiKeyConfig = NonNullable<LocalConfig['apiKeys']>[number];

/** A config that cannot be used; the message names the source and the first problem paths. */
export class LocalConfigError extends Error {
  readonly source: string;
  readonly problems: string[];

  constructor(source: string, problems: string[]) {
    super(`${source}: ${problems.join('; ')}`);
    this.name = 'LocalConfigError';
    this.source = source;
    this.problems = problems;
  }
}

/** Validates an already-parsed value; `source` names it in errors. */
export function parseLocalConfig(value: unknown, source = 'config'): LocalConfig {
  const result = localConfigSchema.safeParse(value);
  if (!result.success) throw new LocalConfigError(source, describeIssues(result.error));
  return result.data;
}

/** Why the config file was not read, in the node's words. */
function unreadConfigProblem(refusal: BoundedFileRefusal): string {
  switch (refusal.reason) {
    case 'missing':
    case 'unreadable':
      return `cannot read the file (${refusal.code})`;
    case 'not-regular':
      return 'not a regular file (a device, FIFO, socket or directory): pass the JSON config file itself';
    case 'too-large':
      return `larger than ${refusal.maxBytes} bytes`;
  }
}

export async function loadLocalConfig(file: string): Promise<LocalConfig> {
  // Read only if a regular file of at most MAX_CONFIG_FILE_BYTES (a device or FIFO refused unread).
  // Synchronously: it is read once, at start, before anything is served.
  const read = readRegularFileWithin(file, MAX_CONFIG_FILE_BYTES);
  if (!read.ok) throw new LocalConfigError(file, [unreadConfigProblem(read)]);
  let value: unknown;
  try {
    value = JSON.parse(read.text);
  } catch (err) {
    throw new LocalConfigError(file, [`not valid JSON (${(err as Error).message})`]);
  }
  return parseLocalConfig(value, file);
}

/** Resolved limits with their defaults, so callers never repeat the fallbacks. */
export function maxBodyBytes(config: LocalConfig): number {
  return config.limits?.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
}
