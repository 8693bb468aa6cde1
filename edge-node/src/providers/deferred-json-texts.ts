/**
 * Tool-call input kept out of a text list until a guardrail direction has rules for it. A request
 * or a JSON answer lists one stand-in per JSON place (an OpenAI `arguments` text, an Anthropic
 * `*_tool_use` block's `input`); resolveDeferredTexts replaces the stand-ins, in place, with the
 * slots of the strings inside them (json-string-slots.ts, which marks the list partial past its
 * limits) right before rules read the list. So a key without a policy, or a direction without
 * rules, pays no JSON.parse and no slot per string of an agent's history.
 *
 * Until then a stand-in reads as its raw text (the `arguments` string; an `input` object
 * serialised when read), for what only reads delivered text (the kept response text and the output
 * estimate); input token estimates use estimateInputTokens, which serialises nothing.
 */
import type { TextSlot } from '../pipeline/context.js';
import { JsonStringWalk } from './json-string-slots.js';
import { FieldSlot } from './text-slot.js';
import { denseTextWeight, estimateTokens, tokensForCharacters } from './token-estimate.js';

/** Lists holding stand-ins, each mapped to itself as the mutable array its provider built. */
const pending = new WeakMap<readonly TextSlot[], TextSlot[]>();

abstract class DeferredJson implements TextSlot {
  constructor(
    protected readonly holder: Record<string, unknown>,
    protected readonly key: string,
  ) {}

  get text(): string {
    return this.raw();
  }

  set text(_next: string) {
    // Rules only ever see resolved lists: a write here would skip the walk, so it must not pass quietly.
    throw new Error('a deferred JSON text was written before resolveDeferredTexts');
  }

  /** What the stand-in reads as. */
  protected abstract raw(): string;

  abstract expand(walk: JsonStringWalk): void;

  abstract estimatedTokens(): number;
}

/** An OpenAI `arguments` text: reads as itself. */
class DeferredJsonText extends DeferredJson {
  protected raw(): string {
    const value = this.holder[this.key];
    return typeof value === 'string' ? value : '';
  }

  expand(walk: JsonStringWalk): void {
    walk.addJsonText(this.holder, this.key);
  }

  estimatedTokens(): number {
    return estimateTokens(this.raw());
  }
}

/** A tool_use block's parsed `input`: reads as its JSON (only delivered-text readers read it). */
class DeferredJsonValue extends DeferredJson {
  protected raw(): string {
    return JSON.stringify(this.holder[this.key]) ?? '';
  }

  expand(walk: JsonStringWalk): void {
    walk.add(this.holder, this.key);
  }

  estimatedTokens(): number {
    return jsonTokens(this.holder[this.key]);
  }
}

/**
 * Defers the strings inside the JSON text at `holder[key]` (JsonStringWalk.addJsonText) into
 * `slots`; an object or array sent in place of the text (some clients and servers send `arguments`
 * parsed) is deferred as the parsed JSON it is (deferJsonValue).
 */
export function deferJsonText(slots: TextSlot[], holder: Record<string, unknown>, key: string): void {
  const value = holder[key];
  if (typeof value === 'string') {
    slots.push(new DeferredJsonText(holder, key));
    pending.set(slots, slots);
  } else if (typeof value === 'object' && value !== null) {
    deferJsonValue(slots, holder, key);
  }
}

/** Defers the strings inside the parsed JSON at `holder[key]` (JsonStringWalk.add) into `slots`; a string is a slot at once. */
export function deferJsonValue(slots: TextSlot[], holder: Record<string, unknown>, key: string): void {
  const value = holder[key];
  if (typeof value === 'string') {
    slots.push(new FieldSlot(holder, key));
  } else if (typeof value === 'object' && value !== null) {
    slots.push(new DeferredJsonValue(holder, key));
    pending.set(slots, slots);
  }
}

/**
 * Replaces the stand-ins in `slots` with the slots of the strings inside them, once (later calls
 * do nothing). Call before reading the list for rules, and before asking isPartial about it.
 */
export function resolveDeferredTexts(slots: readonly TextSlot[]): void {
  const list = pending.get(slots);
  if (list === undefined) return;
  pending.delete(slots);
  const listed = list.splice(0, list.length);
  const walk = new JsonStringWalk(list);
  for (const slot of listed) {
    if (slot instanceof DeferredJson) slot.expand(walk);
    else list.push(slot);
  }
  walk.finish();
}

/**
 * A cheap token estimate of a request's texts: a JSON text by its raw length, a parsed JSON value
 * (an input or arguments object) by the length of the JSON it serialises to (jsonTokens), nothing
 * parsed or serialised. A repeated text (TextSlot.repeated) is counted where it first appears only.
 */
export function estimateInputTokens(slots: readonly TextSlot[]): number {
  let tokens = 0;
  for (const slot of slots) {
    if (slot.repeated === true) continue;
    tokens += slot instanceof DeferredJson ? slot.estimatedTokens() : estimateTokens(slot.text);
  }
  return tokens;
}

/**
 * estimateTokens of the JSON text `root` serialises to, counted by a walk that builds no text: its
 * strings and keys (quoted and escaped), numbers, true, false and null, and the brackets, commas and
 * colons between them. Not its strings alone: the upstream reads and bills the whole JSON, and a
 * `[0,0,0,…]` or `[true,…]` of hundreds of KB must not reserve one token. At any depth (an
 * explicit stack: the walk stops at MAX_DEPTH and guardrails then refuse the text, but the estimate
 * feeds credit pre-authorisation, which must count what lies deeper too).
 */
function jsonTokens(root: unknown): number {
  const count: JsonLength = { chars: 0, dense: 0 };
  const stack: object[] = [];
  countValue(root, count, stack);
  while (stack.length > 0) {
    const node = stack.pop();
    if (Array.isArray(node)) {
      // The brackets and a comma between items.
      count.chars += node.length === 0 ? 2 : node.length + 1;
      for (const item of node) countValue(item, count, stack);
    } else if (node !== undefined) {
      let keys = 0;
      // for…in, not Object.keys: no array per object (parsed JSON inherits no enumerable keys).
      for (const key in node) {
        keys += 1;
        countValue(key, count, stack);
        countValue((node as Record<string, unknown>)[key], count, stack);
      }
      // The braces, a colon per key and a comma between keys.
      count.chars += keys === 0 ? 2 : 2 * keys + 1;
    }
  }
  return tokensForCharacters(count.chars, count.dense);
}

/** The JSON text jsonTokens has counted: its characters, and their denseTextWeight. */
interface JsonLength {
  chars: number;
  dense: number;
}

/** Counts a string or scalar into `count`, or puts an object or array on `stack` to be walked. */
function countValue(value: unknown, count: JsonLength, stack: object[]): void {
  if (typeof value === 'string') {
    count.chars += jsonStringLength(value);
    count.dense += denseTextWeight(value);
  } else if (typeof value === 'object' && value !== null) {
    stack.push(value);
  } else {
    count.chars += scalarLength(value);
  }
}

/** The length of a number, true, false or null in JSON. */
function scalarLength(value: unknown): number {
  if (typeof value === 'boolean') return value ? 4 : 5;
  if (typeof value !== 'number') return 4;
  const magnitude = Math.abs(value);
  if (Number.isInteger(value) && magnitude < 1e21) {
    // Integers, the common case, by their digits: no string per number (JSON writes -0 as 0).
    let length = value < 0 ? 2 : 1;
    for (let power = 10; power <= magnitude; power *= 10) length += 1;
    return length;
  }
  // As JSON.stringify writes it: a number that parsed to Infinity (1e999) is sent as null.
  return Number.isFinite(value) ? String(value).length : 4;
}

/** Characters JSON.stringify escapes: the quote, the backslash, control characters and lone surrogates. */
// eslint-disable-next-line no-control-regex -- control characters are what JSON escapes
const ESCAPED = /["\\\u0000-\u001f]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
/** The escaped characters JSON writes in two characters (`\n`); the others take six (`\u0001`). */
const SHORT_ESCAPES: ReadonlySet<string> = new Set(['"', '\\', '\b', '\f', '\n', '\r', '\t']);

/** The length of `text` as a JSON string: quoted, and escaped as JSON.stringify escapes it. */
function jsonStringLength(text: string): number {
  let length = text.length + 2;
  const escaped = text.match(ESCAPED);
  if (escaped !== null) for (const char of escaped) length += SHORT_ESCAPES.has(char) ? 1 : 5;
  return length;
}
