/**
 * TextSlots bound to a field of a parsed JSON object: reading gives the field, writing rewrites it
 * (so a guardrail's mask lands in the body that is forwarded or delivered) and marks the owner
 * dirty, which tells a stream event to re-serialise. A class, not closures: streams make many.
 */
import type { TextSlot } from '../pipeline/context.js';

export interface DirtyMark {
  dirty: boolean;
}

export class FieldSlot implements TextSlot {
  constructor(
    private readonly holder: Record<string, unknown>,
    private readonly field: string,
    private readonly owner?: DirtyMark,
    readonly channel?: number,
  ) {}

  get text(): string {
    const value = this.holder[this.field];
    return typeof value === 'string' ? value : '';
  }

  set text(value: string) {
    this.holder[this.field] = value;
    if (this.owner !== undefined) this.owner.dirty = true;
  }
}

/** A FieldSlot for a part of its channel other than the main text (TextSlot.part), JSON or not. */
export class PartSlot extends FieldSlot {
  constructor(
    holder: Record<string, unknown>,
    field: string,
    owner: DirtyMark | undefined,
    channel: number,
    readonly part: number,
    readonly json: boolean,
  ) {
    super(holder, field, owner, channel);
  }
}

/** A FieldSlot for text the model did not write (TextSlot.notGenerated): a server tool's result, a citation. */
export class NotGeneratedSlot extends FieldSlot {
  readonly notGenerated = true;
}

/** A FieldSlot repeating another slot's text (TextSlot.repeated): checked, counted once elsewhere. */
export class RepeatedSlot extends FieldSlot {
  readonly notGenerated = true;
  readonly repeated = true;
}

/** A PartSlot repeating another slot's text (TextSlot.repeated): a running text of its own, counted once elsewhere. */
export class RepeatedPartSlot extends PartSlot {
  readonly notGenerated = true;
  readonly repeated = true;
}

export const NO_TEXTS: TextSlot[] = [];

/** Usage numbers from an upstream's JSON: a non-negative integer, else undefined. */
export function tokenCount(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : undefined;
}

/**
 * An optional counter (Anthropic's prompt-cache counters): absent or null is 0 (no cache used),
 * a valid count is itself, anything else (a string, negative, fractional) is undefined: not
 * validly given, so the count it is part of is estimated rather than taken as if it were 0.
 */
export function optionalTokenCount(value: unknown): number | undefined {
  return value === undefined || value === null ? 0 : tokenCount(value);
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
