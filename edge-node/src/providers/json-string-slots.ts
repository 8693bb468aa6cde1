/**
 * The strings inside parsed JSON (an MCP message's params, a tool call's input, an OpenAI tool
 * call's `arguments` text) as TextSlots guardrails read and rewrite: every string value and every
 * object key, at any depth. Keys come after all values, because masking a key renames it and the
 * value slots address their holder by key. Past MAX_TEXT_SLOTS strings or MAX_DEPTH levels the
 * list is marked partial (partial-texts.ts), and guardrails with rules refuse it (fail closed).
 */
import type { TextSlot } from '../pipeline/context.js';
import { markPartial } from './partial-texts.js';
import type { DirtyMark } from './text-slot.js';

/** Strings (values and keys) one walk looks at, and the nesting it follows. */
export const MAX_TEXT_SLOTS = 50_000;
export const MAX_DEPTH = 64;

type Holder = Record<string, unknown> | unknown[];

/**
 * Collects slots into `slots` (which may already hold others, e.g. message content): call `add` /
 * `addJsonText` for each place, then `finish` once. Writing a slot marks its owner dirty (an event
 * re-serialises only what changed).
 */
export class JsonStringWalk {
  private readonly keys: TextSlot[] = [];
  private count = 0;
  private partial = false;

  constructor(
    /** Where the slots go (the caller may add others of its own between walks). */
    readonly slots: TextSlot[] = [],
    private readonly owner?: DirtyMark,
  ) {}

  /** The strings of `holder[key]`: itself when it is a string, else every string value and key inside. */
  add(holder: Holder, key: string | number, owner: DirtyMark | undefined = this.owner): void {
    const node = (holder as Record<string | number, unknown>)[key];
    if (typeof node === 'string') this.value(holder, key, owner);
    else this.visit(node, 1, owner);
  }

  /**
   * The strings inside the JSON text at `holder[key]` (a tool call's `arguments`). A write puts the
   * re-serialised JSON in its place, so a text nothing masked stays byte for byte as it came. Text
   * that is not a JSON object or array is one text of its own.
   */
  addJsonText(holder: Record<string, unknown>, key: string, owner: DirtyMark | undefined = this.owner): void {
    const text = holder[key];
    if (typeof text !== 'string') return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    if (typeof parsed === 'object' && parsed !== null) this.visit(parsed, 1, new JsonTextOwner(holder, key, parsed, owner));
    else this.value(holder, key, owner);
  }

  /** `slots` with the key slots appended, marked partial when the walk stopped at a limit. */
  finish(): TextSlot[] {
    for (const slot of this.keys) this.slots.push(slot);
    if (this.partial) markPartial(this.slots);
    return this.slots;
  }

  private get full(): boolean {
    return this.count >= MAX_TEXT_SLOTS;
  }

  private value(holder: Holder, key: string | number, owner: DirtyMark | undefined): void {
    if (this.full) {
      this.partial = true;
      return;
    }
    this.count += 1;
    this.slots.push(new ValueSlot(holder, key, owner));
  }

  private visit(node: unknown, depth: number, owner: DirtyMark | undefined): void {
    if (typeof node !== 'object' || node === null || this.partial) return;
    if (depth > MAX_DEPTH) {
      this.partial = true;
      return;
    }
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length && !this.partial; i += 1) {
        if (typeof node[i] === 'string') this.value(node, i, owner);
        else this.visit(node[i], depth + 1, owner);
      }
      return;
    }
    const holder = node as Record<string, unknown>;
    for (const key of Object.keys(holder)) {
      if (this.full) {
        this.partial = true;
        return;
      }
      this.count += 1;
      this.keys.push(new KeySlot(holder, key, owner));
      if (typeof holder[key] === 'string') this.value(holder, key, owner);
      else this.visit(holder[key], depth + 1, owner);
      if (this.partial) return;
    }
  }
}

/** The current text at `holder[key]` where addJsonText walked: the re-serialised JSON once a slot was written. */
export function jsonTextOf(holder: Record<string, unknown>, key: string): string {
  const value = holder[key];
  return value instanceof ReserialisedJson ? value.toJSON() : typeof value === 'string' ? value : '';
}

/**
 * Stands for a JSON text some of whose strings were rewritten: serialised (as the string it is)
 * only when its body is, so many masks in one text cost one re-serialisation, not one each.
 */
class ReserialisedJson {
  constructor(private readonly parsed: unknown) {}

  toJSON(): string {
    return JSON.stringify(this.parsed);
  }
}

/** The owner of the slots inside a parsed JSON text: the first write swaps the text for its lazy re-serialisation. */
class JsonTextOwner implements DirtyMark {
  constructor(
    private readonly holder: Record<string, unknown>,
    private readonly key: string,
    private readonly parsed: unknown,
    private readonly parent: DirtyMark | undefined,
  ) {}

  get dirty(): boolean {
    return this.holder[this.key] instanceof ReserialisedJson;
  }

  set dirty(value: boolean) {
    if (!value) return;
    if (!(this.holder[this.key] instanceof ReserialisedJson)) this.holder[this.key] = new ReserialisedJson(this.parsed);
    if (this.parent !== undefined) this.parent.dirty = true;
  }
}

/** A string value in an object or array. */
class ValueSlot implements TextSlot {
  constructor(
    private readonly holder: Holder,
    private readonly key: string | number,
    private readonly owner: DirtyMark | undefined,
  ) {}

  get text(): string {
    const value = (this.holder as Record<string | number, unknown>)[this.key];
    return typeof value === 'string' ? value : '';
  }

  set text(next: string) {
    // defineProperty: an own "__proto__" key from JSON.parse stays a plain property.
    Object.defineProperty(this.holder, this.key, { value: next, writable: true, enumerable: true, configurable: true });
    if (this.owner !== undefined) this.owner.dirty = true;
  }
}

/** An object key: masking renames it (a numbered suffix when the new name is taken). */
class KeySlot implements TextSlot {
  constructor(
    private readonly holder: Record<string, unknown>,
    private key: string,
    private readonly owner: DirtyMark | undefined,
  ) {}

  get text(): string {
    return this.key;
  }

  set text(next: string) {
    if (next === this.key) return;
    let name = next;
    for (let n = 2; Object.hasOwn(this.holder, name); n += 1) name = `${next} (${n})`;
    Object.defineProperty(this.holder, name, { value: this.holder[this.key], writable: true, enumerable: true, configurable: true });
    delete this.holder[this.key];
    this.key = name;
    if (this.owner !== undefined) this.owner.dirty = true;
  }
}
