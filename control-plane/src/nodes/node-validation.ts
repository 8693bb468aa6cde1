/**
 * The Add Node wizard's fields and every rule of seed 004 §9.2/§9.3, as zod schemas. Each rule has
 * its own message, and a rejection reads `field: rule` (`installDir: must not be under /tmp`) so the
 * console can mark the field and the operator knows what to change.
 */
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import { z } from 'zod';
import { describeConfigIssues, text } from '../config/config-fields.js';
import { zenovaError } from '../errors.js';
import { baseUrlShapeProblem, dotSegmentProblem, withoutTrailingSlash } from '../http/base-url-rules.js';
import { NODE_NAME_PATTERN, NODE_NAME_RULE } from '../../../proto/src/node-name.js';
import { forbiddenInstallRootRule } from '../../../proto/src/install-dir-rules.js';

// Re-exported: the routes and tests take the node name rule from here, with the other node fields'.
export { NODE_NAME_PATTERN, NODE_NAME_RULE };
export const SURFACES = ['model', 'tools'] as const;
export type Surface = (typeof SURFACES)[number];
export const SPOOL_FULL_POLICIES = ['reject', 'metering-only'] as const;
export type SpoolFullPolicy = (typeof SPOOL_FULL_POLICIES)[number];

/** The central node's name (seed 004 §9.1): the control-plane host's own gateway node. */
export const CENTRAL_NODE_NAME = 'office-primary';
/** The central (control-plane host) install; a node dir may neither be in it nor contain it. */
export const CENTRAL_INSTALL_DIR = '/opt/zenova';
export const SPOOL_QUOTA_GB = { min: 1, max: 10_000, default: 10 } as const;
export const REPLICAS = { min: 1, max: 16, default: 1 } as const;
const MAX_INSTALL_DIR_CHARS = 255;
const MAX_URL_CHARS = 2_048;
const MAX_ADDRESS_CHARS = 255;
const MAX_REGION_CHARS = 64;
/** A CA bundle is a few certificates; anything much larger is a paste mistake. */
export const MAX_CA_PEM_CHARS = 64 * 1024;
const MAX_CA_CERTIFICATES = 16;

type Ctx = z.core.$RefinementCtx<string>;

/** Empty or blank means "not given" for optional text fields (forms send ""). */
const blankAsUndefined = (value: unknown): unknown =>
  typeof value === 'string' && value.trim() === '' ? undefined : value;

const isWithin = (dir: string, root: string): boolean => dir === root || dir.startsWith(`${root}/`);

// ---- name ----

/**
 * A new node's name. Lookups take any name of NODE_NAME_PATTERN (the database's rule, so a node
 * named before the edge rule stays reachable); a new name may not begin or end with a hyphen,
 * which the CLI would read as an option (`zenova gateway-node delete -ab`) or which looks cut off.
 */
export const nodeNameSchema = text().check((ctx) => {
  const rule = !NODE_NAME_PATTERN.test(ctx.value)
    ? NODE_NAME_RULE
    : ctx.value.startsWith('-') || ctx.value.endsWith('-') ? 'must begin and end with a letter or digit' : undefined;
  if (rule !== undefined) ctx.issues.push({ code: 'custom', input: ctx.value, message: rule });
});

// ---- install dir ----

/** The rule an install dir breaks, or undefined when it is fine. Trailing slashes are ignored. */
export function installDirProblem(value: string): string | undefined {
  if (value.length > MAX_INSTALL_DIR_CHARS) return `must be at most ${MAX_INSTALL_DIR_CHARS} characters`;
  if (!value.startsWith('/')) return 'must be an absolute path (start with /)';
  if (!/^[A-Za-z0-9._/-]+$/.test(value)) return "may contain only letters, digits, '.', '_', '-' and '/'";
  const dir = normaliseInstallDir(value);
  const segments = dir === '/' ? [] : dir.split('/').slice(1);
  if (segments.some((s) => s === '')) return "must not contain empty path segments ('//')";
  if (segments.some((s) => s === '.' || s === '..')) return "must not contain '.' or '..' segments";
  if (segments.length < 2) return 'must be at least two levels deep (e.g. /data/zenova-node)';
  if (isWithin(dir, CENTRAL_INSTALL_DIR) || isWithin(CENTRAL_INSTALL_DIR, dir)) {
    return `must not be inside or overlap the central install ${CENTRAL_INSTALL_DIR}`;
  }
  // Places a node install dir must not be under, and the tmpfs and pseudo filesystems that would
  // lose it: one list with the installer's, in proto/src/install-dir-rules.ts.
  return forbiddenInstallRootRule(dir);
}

function normaliseInstallDir(value: string): string {
  const trimmed = value.replace(/\/+$/, '');
  return trimmed === '' ? '/' : trimmed;
}

export const installDirSchema = text()
  .check((ctx) => {
    const problem = installDirProblem(ctx.value);
    if (problem) ctx.issues.push({ code: 'custom', input: ctx.value, message: problem });
  })
  .transform(normaliseInstallDir);

// ---- control-plane URL ----

/** The rule a control-plane callback URL breaks, or undefined. */
export function controlPlaneUrlProblem(value: string): string | undefined {
  if (value.length > MAX_URL_CHARS) return `must be at most ${MAX_URL_CHARS} characters`;
  if (!value.startsWith('https://')) return 'must start with https://';
  const shape = baseUrlShapeProblem(value);
  if (shape) return shape;
  // It goes into a shell command: plain URL characters only, each literal in single quotes, which
  // install-command.ts adds when one means something to a shell unquoted (the `[ ]` of IPv6, `~`).
  if (!/^[A-Za-z0-9._~:/[\]%-]+$/.test(value)) return 'may contain only letters, digits and . _ ~ : / [ ] % -';
  // The console page's address pasted for the callback URL: every install command made with it would fail.
  // Judged by the path the URL resolves to, as nodes request it: `/console/.` and `/%63onsole` are /console too.
  if (/\/console\/*$/i.test(resolvedPath(value))) return 'is the console page\'s address (ends in /console): give the control plane\'s callback URL without it';
  // Nodes resolve the URL: the path in the install command and the node list would not be the one called.
  return dotSegmentProblem(value);
}

/** The URL's path with dot segments resolved and unreserved characters' %XX escapes (either case) decoded. */
function resolvedPath(value: string): string {
  return new URL(value).pathname.replace(/%([0-9A-Fa-f]{2})/g, (escape, hex: string) => {
    const char = String.fromCharCode(parseInt(hex, 16));
    return /^[A-Za-z0-9._~-]$/.test(char) ? char : escape;
  });
}

export const controlPlaneUrlSchema = text()
  .check((ctx) => {
    const problem = controlPlaneUrlProblem(ctx.value);
    if (problem) ctx.issues.push({ code: 'custom', input: ctx.value, message: problem });
  })
  .transform(withoutTrailingSlash);

// ---- node address ----

const DNS_LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

/**
 * A host name (RFC 1123): labels of letters, digits and hyphens, and a last label that is not all
 * digits, so a mistyped IPv4 address (`10.0.0.256`, `10.0.0`) is not taken for a name no resolver
 * will ever answer.
 */
function isDnsName(host: string): boolean {
  const labels = host.split('.');
  return host.length <= 253 && labels.every((label) => DNS_LABEL.test(label)) && !/^\d+$/.test(labels[labels.length - 1] ?? '');
}

function isPort(text: string): boolean {
  return /^\d{1,5}$/.test(text) && Number(text) >= 1 && Number(text) <= 65535;
}

/** A DNS name or IP address, optionally with :port (IPv6 in brackets when a port is given). */
export function isNodeAddress(value: string): boolean {
  if (value.length > MAX_ADDRESS_CHARS) return false;
  const address = value.toLowerCase();
  if (isIP(address) !== 0) return true;
  const bracketed = /^\[([0-9a-f:.]+)\](?::(\d+))?$/.exec(address);
  if (bracketed) return isIP(bracketed[1] ?? '') === 6 && (bracketed[2] === undefined || isPort(bracketed[2]));
  const [host = '', port, ...rest] = address.split(':');
  if (rest.length > 0) return false;
  if (port !== undefined && !isPort(port)) return false;
  return isIP(host) === 4 || isDnsName(host);
}

export const nodeAddressSchema = text()
  .check((ctx) => {
    if (!isNodeAddress(ctx.value)) {
      ctx.issues.push({
        code: 'custom',
        input: ctx.value,
        message: `must be a DNS name or IP address, optionally with :port (at most ${MAX_ADDRESS_CHARS} characters)`,
      });
    }
  })
  .transform((value) => value.toLowerCase());

// ---- CA PEM ----

const PEM_BLOCK = /-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----/g;

/** The certificates of a pasted CA bundle, or the rule it breaks. */
export function parseCaPem(value: string): { pem: string } | { problem: string } {
  if (value.length > MAX_CA_PEM_CHARS) return { problem: `must be at most ${MAX_CA_PEM_CHARS} characters` };
  const blocks = value.match(PEM_BLOCK) ?? [];
  if (blocks.length === 0) return { problem: 'must be one or more PEM certificates (-----BEGIN CERTIFICATE-----)' };
  if (value.replace(PEM_BLOCK, '').trim() !== '') {
    return { problem: 'must contain only PEM certificates (found other text around them)' };
  }
  if (blocks.length > MAX_CA_CERTIFICATES) return { problem: `must hold at most ${MAX_CA_CERTIFICATES} certificates` };
  for (const [index, block] of blocks.entries()) {
    try {
      new X509Certificate(block);
    } catch {
      const which = blocks.length > 1 ? ` (certificate ${index + 1})` : '';
      return { problem: `must parse as an X.509 certificate${which}` };
    }
  }
  return { pem: `${blocks.map((b) => b.replace(/\r\n/g, '\n')).join('\n')}\n` };
}

export const caPemSchema = text().transform((value: string, ctx: Ctx) => {
  const parsed = parseCaPem(value);
  if ('problem' in parsed) {
    ctx.addIssue({ code: 'custom', message: parsed.problem });
    return z.NEVER;
  }
  return parsed.pem;
});

// ---- the rest ----

/**
 * Letters may carry combining marks (Thai and Devanagari vowel signs, a decomposed `ã`), but a mark
 * may not stand alone on a space or a punctuation sign.
 */
const REGION_PATTERN = /^(?:[\p{L}\p{N}]\p{M}*|[ ._()/-])+$/u;

export const regionSchema = text()
  // NFC, so one name typed composed or decomposed (`São`, `Sa\u0303o`) is stored and compared alike;
  // the limit counts code points of that form (a mark that does not compose counts as one).
  .transform((value) => value.trim().normalize('NFC'))
  .check((ctx) => {
    if (Array.from(ctx.value).length > MAX_REGION_CHARS || !REGION_PATTERN.test(ctx.value)) {
      ctx.issues.push({
        code: 'custom',
        input: ctx.value,
        message: `must be at most ${MAX_REGION_CHARS} characters of letters, digits, spaces and . _ ( ) / -`,
      });
    }
  });

export const surfacesSchema = z
  .array(z.enum(SURFACES, { error: () => `must be one of ${SURFACES.join(', ')}` }), {
    error: (issue) => (issue.input === undefined ? 'is required' : 'must be an array'),
  })
  .check((ctx) => {
    if (!ctx.value.includes('model')) {
      ctx.issues.push({ code: 'custom', input: ctx.value, message: "must include 'model' (the model gateway is mandatory)" });
    }
    if (new Set(ctx.value).size !== ctx.value.length) {
      ctx.issues.push({ code: 'custom', input: ctx.value, message: 'must not list a surface twice' });
    }
  })
  // One canonical order, so equal sets compare and display alike.
  .transform((value) => SURFACES.filter((s) => value.includes(s)));

function integerIn(range: { min: number; max: number; default: number }): z.ZodDefault<z.ZodNumber> {
  const rule = `must be an integer from ${range.min} to ${range.max}`;
  return z.number({ error: () => rule }).int({ error: () => rule }).min(range.min, { error: () => rule })
    .max(range.max, { error: () => rule }).default(range.default);
}

export const nodeCreateSchema = z.strictObject({
  name: nodeNameSchema,
  region: z.preprocess(blankAsUndefined, regionSchema.optional()),
  surfaces: surfacesSchema,
  installDir: z.preprocess(blankAsUndefined, installDirSchema.optional()),
  address: nodeAddressSchema,
  controlPlaneUrl: controlPlaneUrlSchema,
  caPem: z.preprocess(blankAsUndefined, caPemSchema.optional()),
  spoolQuotaGb: integerIn(SPOOL_QUOTA_GB),
  spoolFullPolicy: z.enum(SPOOL_FULL_POLICIES, { error: () => `must be one of ${SPOOL_FULL_POLICIES.join(', ')}` })
    .default('reject'),
  replicas: integerIn(REPLICAS),
}, { error: (issue) => (issue.code === 'invalid_type' ? 'must be a JSON object' : undefined) });

export type NodeCreateInput = z.output<typeof nodeCreateSchema>;

/** Edit network: each field optional; `caPem: null` (or blank) removes the CA. */
export const nodeNetworkPatchSchema = z.strictObject({
  address: nodeAddressSchema.optional(),
  controlPlaneUrl: controlPlaneUrlSchema.optional(),
  caPem: z.preprocess((v) => (typeof v === 'string' && v.trim() === '' ? null : v), caPemSchema.nullable().optional()),
}, { error: (issue) => (issue.code === 'invalid_type' ? 'must be a JSON object' : undefined) })
  .check((ctx) => {
    if (ctx.value.address === undefined && ctx.value.controlPlaneUrl === undefined && ctx.value.caPem === undefined) {
      ctx.issues.push({ code: 'custom', input: ctx.value, message: 'must change at least one of address, controlPlaneUrl, caPem' });
    }
  });

export type NodeNetworkPatch = z.output<typeof nodeNetworkPatchSchema>;

/** Parses with `schema` or throws ZN_ERR_CP_INVALID_REQUEST naming each field and rule. */
export function parseNodeInput<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  const result = schema.safeParse(body);
  if (!result.success) throw zenovaError('ZN_ERR_CP_INVALID_REQUEST', describeConfigIssues(result.error.issues), { cause: result.error });
  return result.data;
}
