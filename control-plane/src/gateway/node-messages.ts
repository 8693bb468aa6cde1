/**
 * Validation of what a node sends on its control stream. Protobuf decoding gives types but no
 * limits: a buggy or hostile node could send several payloads at once, negative counters, or
 * megabytes of "hostname". Everything the gateway acts on passes these schemas first.
 */
import { z } from 'zod';
import type { CredentialRotationAck, Hello, NodeMessage } from '../../../proto/src/index.js';

/** The payload cases of NodeMessage, in field order. */
const PAYLOAD_KEYS = [
  'hello', 'heartbeat', 'configAck', 'credentialRotationAck', 'leaseReport', 'leaseReturn', 'upgradeProgress', 'recordBatch',
] as const satisfies ReadonlyArray<keyof NodeMessage>;

export type PayloadKind = (typeof PAYLOAD_KEYS)[number];

// Counters and times are int64 on the wire; the gateway stores them as JSON numbers, so they must
// stay exact doubles. No real node gets near 2^53.
const counter = z.bigint().min(0n, 'must not be negative').max(BigInt(Number.MAX_SAFE_INTEGER), 'is out of range');

/** Free text shown to operators: bounded, and no control characters that could forge log lines. */
const text = (max: number): z.ZodString => z.string().max(max).regex(/^[^\p{Cc}]*$/u, 'must not contain control characters');

const helloSchema = z.object({
  nodeId: z.string().min(1, 'is required').max(64),
  nodeName: text(63),
  version: text(64).min(1, 'is required'),
  // The wire's uint32; above MAX_PROTOCOL_VERSION_FACT it is refused as incompatible (session.ts).
  protocolVersion: z.number().int().min(0).max(0xffff_ffff),
  hostname: text(255),
  arch: text(32),
  appliedConfigVersion: counter,
  // Absent from an older node (PROTOCOL.md): taken as 0 and as no hash.
  highestAppliedConfigVersion: counter.optional(),
  appliedConfigContentSha256: z
    .instanceof(Uint8Array)
    .refine((hash) => hash.byteLength === 0 || hash.byteLength === 32, 'must be a SHA-256 (32 bytes)')
    .optional(),
});

const heartbeatSchema = z.object({
  sentAt: counter,
  requests5m: counter,
  errors5m: counter,
  spoolBytes: counter,
  backfillBacklog: counter,
  appliedConfigVersion: counter,
  ready: z.boolean(),
});

// A refusal's reason is the node's word, shown to operators: bounded and made printable rather than
// refused, so a node with an odd message still gets its refusal recorded (not its session cut).
const reasonText = z.string().max(64 * 1024).transform((v) => v.replace(/\p{Cc}/gu, ' ').slice(0, 1_000));

const configAckSchema = z.object({
  version: counter.min(1n, 'must be a pushed version'),
  ok: z.boolean(),
  error: z.object({
    code: z.string().regex(/^[A-Za-z0-9_.:-]{1,64}$/, 'must be a code of letters, digits and _.:- (at most 64)'),
    message: reasonText,
    retryable: z.boolean(),
  }).optional(),
});

const rotationAckSchema = z.object({
  credentialId: z.string().min(1, 'is required').max(64),
});

export interface ValidHello extends Omit<Hello, 'appliedConfigVersion' | 'highestAppliedConfigVersion' | 'appliedConfigContentSha256'> {
  appliedConfigVersion: number;
  /** The node's mark (0 when it sent none): it refuses versions below it. */
  highestAppliedConfigVersion: number;
  /** The served bundle's configContentSha256; undefined when the node sent none. */
  appliedConfigContentSha256: Buffer | undefined;
}

export interface ValidConfigAck {
  version: number;
  ok: boolean;
  /** Why a push was refused; set (with a stand-in when the node gave none) exactly when !ok. */
  error?: { code: string; message: string; retryable: boolean };
}

export interface ValidHeartbeat {
  sentAt: number;
  requests5m: number;
  errors5m: number;
  spoolBytes: number;
  backfillBacklog: number;
  appliedConfigVersion: number;
  ready: boolean;
}

export type ParsedNodeMessage =
  | { kind: 'hello'; hello: ValidHello }
  | { kind: 'heartbeat'; heartbeat: ValidHeartbeat }
  | { kind: 'credentialRotationAck'; ack: CredentialRotationAck }
  | { kind: 'configAck'; ack: ValidConfigAck }
  /** A payload this control plane does not act on yet (leases, upgrades, records). */
  | { kind: 'unhandled'; payload: PayloadKind }
  /** No payload we know: a newer node's compatible addition (PROTOCOL.md says old peers drop it). */
  | { kind: 'unknown' }
  | { kind: 'invalid'; reason: string };

function describeIssues(payload: PayloadKind, error: z.ZodError): string {
  return error.issues
    .slice(0, 3)
    .map((issue) => `${[payload, ...issue.path.map(String)].join('.')}: ${issue.message}`)
    .join('; ');
}

function toNumbers<T extends Record<string, unknown>>(value: T): { [K in keyof T]: T[K] extends bigint ? number : T[K] } {
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) out[key] = typeof item === 'bigint' ? Number(item) : item;
  return out as { [K in keyof T]: T[K] extends bigint ? number : T[K] };
}

export function parseNodeMessage(message: NodeMessage): ParsedNodeMessage {
  const present = PAYLOAD_KEYS.filter((key) => message[key] !== undefined);
  if (present.length === 0) return { kind: 'unknown' };
  if (present.length > 1) return { kind: 'invalid', reason: `a message carries exactly one payload, got ${present.join(' and ')}` };
  const payload = present[0]!;
  switch (payload) {
    case 'hello': {
      const result = helloSchema.safeParse(message.hello);
      if (!result.success) return { kind: 'invalid', reason: describeIssues(payload, result.error) };
      const { highestAppliedConfigVersion, appliedConfigContentSha256, ...facts } = result.data;
      return {
        kind: 'hello',
        hello: {
          ...toNumbers(facts),
          highestAppliedConfigVersion: Number(highestAppliedConfigVersion ?? 0n),
          appliedConfigContentSha256: appliedConfigContentSha256 !== undefined && appliedConfigContentSha256.byteLength > 0 ? Buffer.from(appliedConfigContentSha256) : undefined,
        },
      };
    }
    case 'heartbeat': {
      const result = heartbeatSchema.safeParse(message.heartbeat);
      if (!result.success) return { kind: 'invalid', reason: describeIssues(payload, result.error) };
      return { kind: 'heartbeat', heartbeat: toNumbers(result.data) };
    }
    case 'configAck': {
      const result = configAckSchema.safeParse(message.configAck);
      if (!result.success) return { kind: 'invalid', reason: describeIssues(payload, result.error) };
      const { version, ok, error } = result.data;
      const ack: ValidConfigAck = { version: Number(version), ok };
      if (!ok) ack.error = error ?? { code: 'UNSPECIFIED', message: 'the node gave no reason', retryable: false };
      return { kind: 'configAck', ack };
    }
    case 'credentialRotationAck': {
      const result = rotationAckSchema.safeParse(message.credentialRotationAck);
      if (!result.success) return { kind: 'invalid', reason: describeIssues(payload, result.error) };
      return { kind: 'credentialRotationAck', ack: result.data };
    }
    default:
      return { kind: 'unhandled', payload };
  }
}
