/**
 * A chat completion stream as pipeline events: each upstream `data:` chunk parsed once; the caller
 * gets its alias back in `model`; usage is recorded into ctx.upstreamUsage as it passes (partial
 * until the stream finishes properly: finalUsage); when the caller did not ask for usage, the
 * usage the node forced on is taken out again: the usage chunk (its `choices` empty, or, from some
 * upstreams, missing with nothing else in it) is dropped (clients index choices[0]), and other
 * chunks' `usage` fields (null or counts) are left out. An event is serialised only when it is
 * written, and only re-built from its parsed JSON when a guardrail rewrote its text (or the quick
 * in-place edit of `model` does not apply). A chunk's texts are each choice's content (a string,
 * or the `text` of each of its parts), reasoning (its fields, and the text of each
 * `reasoning_details` item), refusal (a field, or a refusal part's), tool-call argument fragments
 * and custom tool calls' input fragments, each a part of its choice's channel (TEXT_PART). Data
 * that is not a JSON object is passed on as is, but its texts are unread (UNREAD_TEXTS), and a
 * chunk carrying audio, a content part or tool call of an unknown type with text (its `type`
 * too), a known tool call, content part or reasoning item with strings under keys it does not
 * read (or reasoning items not in a list), or a reasoning or refusal that
 * is not a string but holds text, has its texts marked partial: output rules block them all.
 * Under output rules a chunk's `logprobs` are dropped (keepChecked).
 *
 * How a stream ends: `[DONE]` is the complete answer (terminal; a connection break after it changes
 * nothing). An upstream error (`event: error`, or a chunk with a non-null `error`: an object, or
 * TGI's string) is thrown as ZN_ERR_UPSTREAM_ERROR quoting only its code, never its text. A body
 * that ends without `[DONE]` is thrown as truncated, unless every choice already had its
 * finish_reason (or every choice it sent had one and the usage-only chunk that closes a stream came
 * after them: an upstream that ignores `n` sends fewer choices): some upstreams omit `[DONE]` after
 * a finished answer, and the node then adds it for the caller; a body that breaks there (a reset, a stall) likewise loses nothing of the answer.
 * An upstream that sends no data event for `timeoutMs` (keep-alive comments do not count) is cut
 * as ZN_ERR_UPSTREAM_TIMEOUT (parseSse's idle deadline).
 */
import type { ErrorCode, ZenovaError } from '../../errors.js';
import { zenovaError } from '../../errors.js';
import type { PipelineContext, SseEvent, StreamEvent, TextSlot, UpstreamReply, UpstreamUsage } from '../../pipeline/context.js';
import type { DirtyMark } from '../text-slot.js';
import type { AbortSwitch } from '../../pipeline/abort-switch.js';
import { isAbort, streamBreakFailure, upstreamStreamError } from '../../upstream/upstream-failure.js';
import type { UpstreamResponse } from '../../upstream/upstream-pool.js';
import { MAX_DEPTH, losesStrings } from '../json-string-slots.js';
import { UNREAD_TEXTS, isPartial, markPartial } from '../partial-texts.js';
import { MAX_SSE_EVENT_BYTES, parseSse, sseIdleDeadline } from '../sse.js';
import { FieldSlot, NO_TEXTS, PartSlot, RepeatedPartSlot, isRecord, tokenCount } from '../text-slot.js';
import { AnnotationSlot, annotationSlots } from './chat-annotations.js';
import { StreamToolNameSlot, callerToolNames, holdsNameText, typeHoldsText, unknownCallTypeHoldsText } from './chat-tool-names.js';
import { callCarriesStrings, carriesStrings, withoutPlaceholderBrackets, choiceCarriesOtherText, deltaCarriesOtherText, hasUnknownStrings, holdsUnreadText, isKnownPart, isKnownToolCall, knownPartCarriesOtherText, reasoningItemsCarryOtherText, reasoningRepeatsReasoningContent, repeatsReasoning, toolCallCarriesOtherText } from './chat-content-parts.js';

const USAGE_NULL = ',"usage":null';
/**
 * Whether `at` in the JSON object `text` lies in the object itself, not in a nested object or
 * array nor in a string: a scan from the start that skips strings and counts brackets.
 */
function atTopLevel(text: string, at: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < at; i += 1) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i += 1;
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b /* { */ || c === 0x5b /* [ */) depth += 1;
    else if (c === 0x7d /* } */ || c === 0x5d /* ] */) depth -= 1;
  }
  return depth === 1 && !inString;
}
const DONE: SseEvent = { data: '[DONE]' };
/**
 * How long the rest of the body may take once `[DONE]` was read: it is drained (so the connection
 * stays reusable) but an upstream that stalls there does not hold back the caller's [DONE].
 */
const AFTER_DONE_GRACE_MS = 1000;

/** The fields of a chunk that are no payload of their own: a chunk without choices that has only these and usage is the usage chunk. */
const ENVELOPE_FIELDS: ReadonlySet<string> = new Set(['id', 'object', 'created', 'model', 'system_fingerprint', 'service_tier', 'provider', 'obfuscation', 'choices', 'usage']);

/**
 * Whether a chunk carrying usage is the usage chunk, nothing a caller reads: `choices` empty (as
 * OpenAI sends it, whatever vendor fields ride along: Groq's `x_groq`, Azure's
 * `prompt_filter_results`), or missing (some upstreams) with no other payload beside the envelope.
 */
function isUsageOnly(chunk: Record<string, unknown>): boolean {
  const choices = chunk.choices;
  if (Array.isArray(choices)) return choices.length === 0;
  if (choices !== undefined && choices !== null) return false;
  for (const key in chunk) if (!ENVELOPE_FIELDS.has(key)) return false;
  return true;
}

/** Where one upstream stream comes from, for its failures and timings. */
export interface ChatStreamSource {
  /** The upstream's name, for error messages. */
  upstream: string;
  /** The node's key for the upstream: an error it reports in the stream never quotes it (upstreamStreamError). */
  upstreamKey?: string | undefined;
  /** The attempt's switch: an abort (timeout, caller gone) is rethrown as is, for forwardPlan. */
  signal: AbortSwitch;
  /** monotonic ms when the request went upstream (ctx.upstreamMs is measured from it). */
  sentAt: number;
  /** How many choices the caller asked for (`n`): a stream without [DONE] must have finished them all. */
  choices: number;
  /** The attempt's timeout: also the longest gap allowed between two events. */
  timeoutMs: number;
}

/** What every event of one stream shares. */
class ChatStreamShape {
  readonly aliasJson: string;
  private upstreamModel = '';
  private needle = '';
  /**
   * "channel:index" of the tool calls of an unknown type seen so far: their later fragments (which
   * carry no type) are unread text too. Null until the stream has one.
   */
  private unknownCalls: Set<string> | null = null;
  /** Per choice, its tool call names still coming in pieces (not ended yet), by their part (namePart). */
  private readonly openNames = new Map<number, Map<number, OpenName>>();
  /** Per choice, the indexes of the tool calls it started. */
  private readonly startedCalls = new Map<number, Set<number>>();

  constructor(
    readonly alias: string,
    readonly hideUsage: boolean,
    /** The tool names the caller's request declares: a call's name among them is not checked (chat-tool-names.ts). */
    readonly toolNames: ReadonlySet<string>,
  ) {
    this.aliasJson = JSON.stringify(alias);
  }

  /** `"model":"<upstream model>"` as the upstream wrote it (cached: it is the same on every chunk). */
  modelNeedle(model: string): string {
    if (model !== this.upstreamModel) {
      this.upstreamModel = model;
      this.needle = `"model":${JSON.stringify(model)}`;
    }
    return this.needle;
  }

  /** Whether tool call `index` of choice `channel` is of an unknown type; `call` (its fragment) makes it so when its type says. */
  unknownCall(call: Record<string, unknown>, channel: number, index: number): boolean {
    const key = `${channel}:${index}`;
    if (!isKnownToolCall(call)) {
      (this.unknownCalls ??= new Set()).add(key);
      return true;
    }
    return this.unknownCalls !== null && this.unknownCalls.has(key);
  }

  /** Choice `channel`'s open names (created when `create`). */
  names(channel: number, create: boolean): Map<number, OpenName> | undefined {
    let names = this.openNames.get(channel);
    if (names === undefined && create) this.openNames.set(channel, (names = new Map<number, OpenName>()));
    return names;
  }

  /** Whether tool call `index` of choice `channel` starts with this fragment (its first). */
  startsCall(channel: number, index: number): boolean {
    let started = this.startedCalls.get(channel);
    if (started === undefined) this.startedCalls.set(channel, (started = new Set()));
    if (started.has(index)) return false;
    started.add(index);
    return true;
  }

  /** The choice finished: the guard ends all its texts, its names too. */
  finished(channel: number): void {
    this.openNames.delete(channel);
  }
}

/** A tool call's name that came in pieces so far: which call, where its name is, and the name so far. */
interface OpenName {
  readonly index: number;
  readonly kind: NameKind;
  joined: string;
}

/** Where a name is: a tool call's `function` or `custom`, or the legacy `function_call`. */
type NameKind = 'function' | 'custom' | 'function_call';

const NO_ENDS: readonly number[] = [];
/**
 * TextSlot.channel of texts a chunk carries whole (annotation strings, a tool call's made-up name):
 * no choice uses it, so ending it in their chunk flushes nothing a choice's running text holds.
 */
const WHOLE_TEXT_CHANNEL = -1;

/**
 * The texts of one choice (TextSlot.part): its content (0), reasoning in either field some
 * OpenAI-compatible servers use, its refusal, a legacy function call's arguments, the text of
 * reasoning content parts (`{type:'thinking'}`), and from `indexed` on the texts numbered by an
 * index (indexedPart): tool call `i`'s arguments or custom input, `reasoning_details` item `i`'s
 * text or summary. Arguments are JSON parts (held whole by output guardrails).
 */
export const TEXT_PART = { content: 0, reasoningContent: 1, reasoning: 2, refusal: 3, functionCall: 4, thinking: 5, functionCallName: 6, indexed: 7 } as const;

/** The kinds of text numbered by an index, interleaved from TEXT_PART.indexed on. */
const INDEXED = { arguments: 0, customInput: 1, reasoningText: 2, reasoningSummary: 3, thinkingBlock: 4, functionName: 5, customName: 6 } as const;
const INDEXED_KINDS = 7;

/** The part of a name (held whole by output rules, chat-tool-names.ts). */
function namePart(kind: NameKind, index: number): number {
  if (kind === 'function_call') return TEXT_PART.functionCallName;
  return indexedPart(kind === 'function' ? INDEXED.functionName : INDEXED.customName, index);
}

/** The part of text `kind` (INDEXED) of tool call or reasoning_details item `index`. */
function indexedPart(kind: number, index: number): number {
  return TEXT_PART.indexed + index * INDEXED_KINDS + kind;
}

/**
 * Whether a delta's field read only as a string (`reasoning`, `refusal`, a custom input…) is of
 * another shape with text in it (every string and number, as in an odd name): not placeable.
 */
function oddTextField(value: unknown): boolean {
  return typeof value !== 'string' && holdsNameText(value);
}

/** Whether a streamed tool call or reasoning_details item has a valid `index`. */
function hasIndex(item: Record<string, unknown>): boolean {
  const index = item.index;
  return typeof index === 'number' && Number.isSafeInteger(index) && index >= 0;
}

/** A streamed item's `index`, else its place in its array. */
function indexOf(item: Record<string, unknown>, position: number): number {
  return hasIndex(item) ? (item.index as number) : position;
}

/** A delta with nothing but content (and role, a null refusal…): most chunks of an answer. */
function onlyContent(delta: Record<string, unknown>): boolean {
  return (
    delta.tool_calls === undefined &&
    delta.function_call === undefined &&
    delta.reasoning_content === undefined &&
    delta.reasoning === undefined &&
    delta.reasoning_details === undefined &&
    delta.thinking_blocks === undefined &&
    delta.annotations === undefined &&
    (delta.refusal === undefined || delta.refusal === null)
  );
}

/**
 * A function call's `arguments` in a delta (`parent[key]` is the `function` / `function_call`
 * object): a fragment of its JSON part. It reads '' when the field is absent (a tool call's first
 * chunk may carry only its id and name: it still starts that call, which ends the one before), and
 * a JSON value sent in place of the text (some servers send an object) as its JSON text. Writing
 * '' where there was no field leaves it absent; any other write puts the text in as a string.
 */
class ArgumentsSlot implements TextSlot {
  readonly json = true;

  constructor(
    private readonly parent: Record<string, unknown>,
    private readonly key: string,
    private readonly owner: DirtyMark,
    readonly channel: number,
    readonly part: number,
  ) {}

  get text(): string {
    const fn = this.parent[this.key];
    const args = isRecord(fn) ? fn.arguments : undefined;
    if (typeof args === 'string') return args;
    return args === undefined || args === null ? '' : (JSON.stringify(args) ?? '');
  }

  set text(next: string) {
    const current = this.parent[this.key];
    let fn: Record<string, unknown>;
    if (isRecord(current)) {
      fn = current;
    } else {
      if (next === '') return;
      this.parent[this.key] = fn = {};
    }
    if (next === '' && (fn.arguments === undefined || fn.arguments === null)) return;
    fn.arguments = next;
    this.owner.dirty = true;
  }
}

/** Whether `holder[key]` (a call's arguments or custom input) starts its text: not empty nor absent. */
function startsArguments(holder: Record<string, unknown>, key: string): boolean {
  const value = holder[key];
  return value !== undefined && value !== null && value !== '';
}

/** A function object with `arguments` (a text, or a JSON value in its place). */
function hasArguments(fn: Record<string, unknown>): boolean {
  return fn.arguments !== undefined && fn.arguments !== null;
}

/** A delta carrying `text` as part `part` of its choice. */
function partDelta(part: number, text: string): Record<string, unknown> {
  switch (part) {
    case TEXT_PART.content:
      return { content: text };
    case TEXT_PART.reasoningContent:
      return { reasoning_content: text };
    case TEXT_PART.reasoning:
      return { reasoning: text };
    case TEXT_PART.refusal:
      return { refusal: text };
    case TEXT_PART.functionCall:
      return { function_call: { arguments: text } };
    case TEXT_PART.thinking:
      return { content: [{ type: 'thinking', thinking: [{ type: 'text', text }] }] };
    case TEXT_PART.functionCallName:
      return { function_call: { name: withoutPlaceholderBrackets(text) } };
  }
  const indexed = part - TEXT_PART.indexed;
  const index = Math.floor(indexed / INDEXED_KINDS);
  switch (indexed % INDEXED_KINDS) {
    case INDEXED.arguments:
      return { tool_calls: [{ index, function: { arguments: text } }] };
    case INDEXED.customInput:
      return { tool_calls: [{ index, custom: { input: text } }] };
    case INDEXED.reasoningText:
      return { reasoning_details: [{ type: 'reasoning.text', text, index }] };
    case INDEXED.thinkingBlock:
      return { thinking_blocks: [{ type: 'thinking', thinking: text }] };
    case INDEXED.functionName:
      return { tool_calls: [{ index, function: { name: withoutPlaceholderBrackets(text) } }] };
    case INDEXED.customName:
      return { tool_calls: [{ index, custom: { name: withoutPlaceholderBrackets(text) } }] };
  }
  return { reasoning_details: [{ type: 'reasoning.summary', summary: text, index }] };
}

export class ChatChunkEvent implements StreamEvent {
  readonly texts: TextSlot[];
  /**
   * Choices this chunk finishes (finish_reason set), usually none: guardrails release those choices'
   * held text in it and keep holding the others' (never undefined, which would end every choice).
   */
  readonly endsText: readonly number[] = NO_ENDS;
  dirty = false;
  private wire: SseEvent | undefined;
  /** Texts carried whole given a part so far (each its own part of WHOLE_TEXT_CHANNEL). */
  private wholeTextParts = 0;
  /** Its made-up tool names, written into the chunk when it is serialised. */
  private toolNames: StreamToolNameSlot[] | undefined;

  constructor(
    private readonly upstream: SseEvent,
    private readonly chunk: Record<string, unknown>,
    private readonly shape: ChatStreamShape,
    /** A delta the guard made (textEvent): its names are checked already and end no others. */
    private readonly released = false,
  ) {
    const choices = chunk.choices;
    let texts: TextSlot[] = NO_TEXTS;
    // Audio, or content parts with text the stream cannot place (chat-content-parts.ts).
    let unread = false;
    if (Array.isArray(choices)) {
      let ends: number[] | undefined;
      for (const choice of choices) {
        if (!isRecord(choice)) continue;
        const channel = typeof choice.index === 'number' ? choice.index : 0;
        const delta = choice.delta;
        if (isRecord(delta)) {
          if (typeof delta.content === 'string') {
            if (texts === NO_TEXTS) texts = [];
            texts.push(new FieldSlot(delta, 'content', this, channel));
          } else if (Array.isArray(delta.content)) {
            if (texts === NO_TEXTS) texts = [];
            if (!this.contentPartSlots(delta.content as unknown[], channel, texts, TEXT_PART.content, 0)) unread = true;
          } else if (isRecord(delta.content) && (carriesStrings(delta.content, 0) || (!isKnownPart(delta.content) && typeHoldsText(delta.content.type)))) {
            // Content as one part object, a shape OpenAI never sends: text the stream cannot place
            // (its `type` too, when that is no tag the node knows).
            unread = true;
          }
          // Audio (its data and transcript in pieces) is speech the rules cannot read: the texts
          // are marked partial, so output rules end the stream rather than relay it unchecked.
          if (delta.audio !== undefined && delta.audio !== null) unread = true;
          // Reasoning, tool-call arguments: rarer, so looked for only in a delta with more than content.
          if (!onlyContent(delta)) texts = this.partSlots(delta, channel, texts);
          // Text under keys the stream does not read (LiteLLM's thinking_blocks): unread.
          if (deltaCarriesOtherText(delta)) unread = true;
        }
        // Text outside the delta (`text`, `message`, as some compatible servers send): unread.
        if (choiceCarriesOtherText(choice, 'delta')) unread = true;
        if (typeof choice.finish_reason === 'string' && choice.finish_reason !== '') {
          (ends ??= []).push(channel);
          shape.finished(channel);
        }
      }
      // Annotations are checked whole in their chunk: it ends their texts.
      if (this.wholeTextParts > 0) (ends ??= []).push(WHOLE_TEXT_CHANNEL);
      if (ends !== undefined) this.endsText = ends;
    }
    if (unread) {
      if (texts === NO_TEXTS) texts = [];
      markPartial(texts);
    }
    this.texts = texts;
  }

  /**
   * Slots for a delta's content parts (`[{type:'text', text}]`, as some OpenAI-compatible servers
   * send), added to `into`: each part's `text` continues part `textPart` of the choice (its content,
   * or its thinking inside a reasoning part), a refusal part's `refusal` the choice's refusal (as
   * the `refusal` field), a reasoning part's `thinking` (a string, or parts nested in it: Mistral's
   * `{type:'thinking', thinking:[{type:'text', text}]}`) the choice's thinking. False when a part
   * carries text the stream cannot place (a part of an unknown type with strings besides `text` and
   * `refusal`, its own `type` included, nesting past MAX_DEPTH): output rules then block the chunk.
   */
  private contentPartSlots(parts: unknown[], channel: number, into: TextSlot[], textPart: number, depth: number): boolean {
    if (depth > MAX_DEPTH) return false;
    for (const part of parts) {
      if (typeof part === 'string' || (Array.isArray(part) && carriesStrings(part, depth + 1))) return false;
      if (!isRecord(part)) continue;
      // A part of an unknown type: its `type` is no tag the node knows, text as its other strings are.
      // A known part with strings under keys its reading does not take (`{type:'text', text, note}`) too.
      if (isKnownPart(part) ? holdsUnreadText(part) || knownPartCarriesOtherText(part) : hasUnknownStrings(part) || typeHoldsText(part.type)) return false;
      if (typeof part.text === 'string') {
        into.push(textPart === TEXT_PART.content ? new FieldSlot(part, 'text', this, channel) : new PartSlot(part, 'text', this, channel, textPart, false));
      }
      if (typeof part.refusal === 'string') into.push(new PartSlot(part, 'refusal', this, channel, TEXT_PART.refusal, false));
      const thinking = part.thinking;
      if (typeof thinking === 'string') into.push(new PartSlot(part, 'thinking', this, channel, TEXT_PART.thinking, false));
      else if (Array.isArray(thinking) && !this.contentPartSlots(thinking, channel, into, TEXT_PART.thinking, depth + 1)) return false;
    }
    return true;
  }

  /** Slots for the other parts of a choice's delta (see TEXT_PART), added to `texts`. */
  private partSlots(delta: Record<string, unknown>, channel: number, texts: TextSlot[]): TextSlot[] {
    const into = texts === NO_TEXTS ? [] : texts;
    if (typeof delta.reasoning_content === 'string') into.push(new PartSlot(delta, 'reasoning_content', this, channel, TEXT_PART.reasoningContent, false));
    if (typeof delta.reasoning === 'string') {
      // The same text under both reasoning names in this delta: checked, counted once (TextSlot.repeated).
      const Slot = reasoningRepeatsReasoningContent(delta) ? RepeatedPartSlot : PartSlot;
      into.push(new Slot(delta, 'reasoning', this, channel, TEXT_PART.reasoning, false));
    }
    if (typeof delta.refusal === 'string') into.push(new PartSlot(delta, 'refusal', this, channel, TEXT_PART.refusal, false));
    // One of them of a shape OpenAI never sends (`reasoning: {…}`, `refusal: […]`): its text cannot be placed.
    if (!this.released && (oddTextField(delta.reasoning_content) || oddTextField(delta.reasoning) || oddTextField(delta.refusal))) markPartial(into);
    // Items' text besides their string text fields, or the list in another shape: text the stream cannot place.
    if (!this.released && (reasoningItemsCarryOtherText(delta, 'reasoning_details') || reasoningItemsCarryOtherText(delta, 'thinking_blocks'))) markPartial(into);
    const details = delta.reasoning_details;
    if (Array.isArray(details)) {
      // Each item's text (or summary) is a running text of its own, by the item's index; not its
      // `signature`, nor an encrypted item's `data`.
      // Beside `reasoning` they repeat it: checked, counted once (TextSlot.repeated).
      const Slot = repeatsReasoning(delta) ? RepeatedPartSlot : PartSlot;
      details.forEach((detail: unknown, position) => {
        if (!isRecord(detail)) return;
        const index = indexOf(detail, position);
        if (typeof detail.text === 'string') into.push(new Slot(detail, 'text', this, channel, indexedPart(INDEXED.reasoningText, index), false));
        if (typeof detail.summary === 'string') into.push(new Slot(detail, 'summary', this, channel, indexedPart(INDEXED.reasoningSummary, index), false));
      });
    }
    // LiteLLM's thinking_blocks: each block's `thinking` a running text of its own by its place (not
    // its `signature`); beside reasoning_content they repeat it: checked, counted once.
    const blocks = delta.thinking_blocks;
    if (Array.isArray(blocks)) {
      const Slot = repeatsReasoning(delta) ? RepeatedPartSlot : PartSlot;
      blocks.forEach((block: unknown, position) => {
        if (isRecord(block) && typeof block.thinking === 'string') into.push(new Slot(block, 'thinking', this, channel, indexedPart(INDEXED.thinkingBlock, position), false));
      });
    }
    if (isRecord(delta.function_call)) {
      const fc = delta.function_call;
      // Strings under a key the stream does not read: text it cannot place.
      if (!this.released && toolCallCarriesOtherText(fc, 'function')) markPartial(into);
      this.toolNameSlot(() => fc, fc, 'function_call', 0, channel, startsArguments(fc, 'arguments'), into);
      if (hasArguments(delta.function_call)) into.push(new ArgumentsSlot(delta, 'function_call', this, channel, TEXT_PART.functionCall));
    } else if (!this.released && holdsNameText(delta.function_call)) {
      // A legacy function_call of a shape OpenAI never sends (an array): its text cannot be placed.
      markPartial(into);
    }
    if (delta.annotations !== undefined && delta.annotations !== null) {
      // Whole in this chunk: each string a part of its own, on a channel no running text uses, ended here.
      annotationSlots(delta, into, (holder, key) => new AnnotationSlot(holder, key, this, WHOLE_TEXT_CHANNEL, this.wholeTextParts++));
    }
    const calls = delta.tool_calls;
    if (Array.isArray(calls)) {
      calls.forEach((call: unknown, position) => {
        if (!isRecord(call)) {
          if (!this.released && holdsNameText(call)) markPartial(into);
          return;
        }
        const index = indexOf(call, position);
        if (this.shape.unknownCall(call, channel, index)) {
          // A call of a type whose fields are unknown: its text cannot be placed in a running text,
          // nor can its `type` when that is no tag the node knows (read as any other string of it).
          if (callCarriesStrings(call) || unknownCallTypeHoldsText(call)) markPartial(into);
          return;
        }
        if (!this.released) {
          // A name at the top level of a call: no shape OpenAI sends, not placed in a name's text;
          // nor are strings under keys the stream does not read (on the call, in its function or
          // custom object), nor a custom input that is not a string.
          if (holdsNameText(call.name) || toolCallCarriesOtherText(call, 'call') || (isRecord(call.custom) && oddTextField(call.custom.input))) markPartial(into);
          if (this.shape.startsCall(channel, index)) this.endOtherNames(calls as unknown[], call, index, channel, into);
          for (const kind of ['function', 'custom'] as const) {
            const holder = call[kind];
            if (isRecord(holder)) this.toolNameSlot(() => holder, holder, kind, index, channel, startsArguments(holder, kind === 'function' ? 'arguments' : 'input'), into);
            else if (holdsNameText(holder)) markPartial(into);
          }
        }
        // A custom (freeform) tool's input is plain text, a running text like content.
        const custom = call.custom;
        if (isRecord(custom) && typeof custom.input === 'string') into.push(new PartSlot(custom, 'input', this, channel, indexedPart(INDEXED.customInput, index), false));
        // An entry with a valid index is a fragment of that call even without arguments (vLLM
        // starts each call with its id and name only): it ends the call before it. One without an
        // index counts by its place when it carries arguments.
        if (!hasIndex(call) && !(isRecord(call.function) && hasArguments(call.function))) return;
        into.push(new ArgumentsSlot(call, 'function', this, channel, indexedPart(INDEXED.arguments, index)));
      });
    } else if (!this.released && holdsNameText(calls)) {
      // `tool_calls` of a shape OpenAI never sends (an object): its text cannot be placed.
      markPartial(into);
    }
    return into.length === 0 && !isPartial(into) ? texts : into;
  }

  /**
   * A slot for a piece of a tool call's `name` (in `holder`, its `function`, `custom` or
   * `function_call`), held whole by output rules (chat-tool-names.ts): the name so far is kept per
   * call, and the piece that ends it — where its call's arguments (or input) start (`startsArgs`) —
   * takes the whole checked name. A fragment of the call with no piece of its name that starts its
   * arguments ends the name too, with a slot of its own. A name that is not a string but holds
   * strings or numbers cannot be placed so: blocked under output rules.
   */
  private toolNameSlot(place: () => Record<string, unknown>, holder: Record<string, unknown>, kind: NameKind, index: number, channel: number, startsArgs: boolean, into: TextSlot[]): void {
    if (this.released) return;
    const name = holder.name;
    if (typeof name !== 'string' && holdsNameText(name)) markPartial(into);
    const piece = typeof name === 'string' ? name : '';
    const part = namePart(kind, index);
    const names = this.shape.names(channel, piece !== '');
    const open = names?.get(part);
    if (piece === '' && (open === undefined || !startsArgs)) return;
    const joined = (open?.joined ?? '') + piece;
    if (startsArgs) names?.delete(part);
    else if (open !== undefined) open.joined = joined;
    else names!.set(part, { index, kind, joined });
    this.nameSlot(new StreamToolNameSlot(place, piece, joined, startsArgs, channel, part, this.shape.toolNames), into);
  }

  /**
   * The first fragment of tool call `index` (`call`, in `calls`) ends the names of the choice's
   * other calls: each goes out whole in its call's fragment earlier in this chunk, else in an entry
   * of its own put before `call`.
   */
  private endOtherNames(calls: unknown[], call: Record<string, unknown>, index: number, channel: number, into: TextSlot[]): void {
    const names = this.shape.names(channel, false);
    if (names === undefined) return;
    for (const [part, open] of names) {
      if (open.kind === 'function_call' || open.index === index) continue;
      names.delete(part);
      const { kind } = open;
      const place = (): Record<string, unknown> => {
        const at = Math.max(0, calls.indexOf(call));
        const earlier = calls.slice(0, at).find((entry): entry is Record<string, unknown> => isRecord(entry) && entry.index === open.index);
        if (earlier !== undefined) {
          const holder = earlier[kind];
          if (isRecord(holder)) return holder;
          const created: Record<string, unknown> = {};
          earlier[kind] = created;
          return created;
        }
        const holder: Record<string, unknown> = {};
        calls.splice(at, 0, { index: open.index, [kind]: holder });
        return holder;
      };
      this.nameSlot(new StreamToolNameSlot(place, '', open.joined, true, channel, part, this.shape.toolNames), into);
    }
  }

  private nameSlot(slot: StreamToolNameSlot, into: TextSlot[]): void {
    (this.toolNames ??= []).push(slot);
    into.push(slot);
  }

  /** id/object/created of this chunk, for a new chunk of the same completion. */
  templateFields(): Record<string, unknown> {
    const { id, object, created } = this.chunk;
    return { id, object, created };
  }

  keepChecked(): void {
    if (dropLogprobs(this.chunk.choices)) this.dirty = true;
    if (!this.dirty && losesStrings(this.upstream.data, this.chunk)) this.dirty = true;
  }

  get sse(): SseEvent {
    if (this.toolNames !== undefined) for (const name of this.toolNames) if (name.commit()) this.dirty = true;
    if (this.wire !== undefined && !this.dirty) return this.wire;
    this.wire = (this.dirty ? undefined : this.quickEdit()) ?? { data: this.rebuilt() };
    this.dirty = false;
    return this.wire;
  }

  /**
   * The upstream's text with `model` and `usage: null` edited in place, when the first match is the
   * chunk's own field (atTopLevel). One in a nested object first (an upstream's `x_meta.model`,
   * the top-level key written escaped, `"mod\u0065l"`): the chunk is then rebuilt, never the wrong
   * field edited and the real model passed on.
   */
  private quickEdit(): SseEvent | undefined {
    const { chunk, shape } = this;
    // Counts on a chunk with content (some upstreams put them on the finish chunk): rebuilt without them.
    if (shape.hideUsage && chunk.usage !== undefined && chunk.usage !== null) return undefined;
    let data = this.upstream.data;
    if (typeof chunk.model === 'string' && chunk.model !== shape.alias) {
      const needle = shape.modelNeedle(chunk.model);
      const at = data.indexOf(needle);
      if (at === -1 || !atTopLevel(data, at)) return undefined;
      data = `${data.slice(0, at)}"model":${shape.aliasJson}${data.slice(at + needle.length)}`;
    }
    if (shape.hideUsage && chunk.usage === null) {
      const at = data.indexOf(USAGE_NULL);
      if (at === -1 || !atTopLevel(data, at)) return undefined;
      data = data.slice(0, at) + data.slice(at + USAGE_NULL.length);
    }
    return this.upstream.event === undefined ? { data } : { event: this.upstream.event, data };
  }

  private rebuilt(): string {
    const { chunk, shape } = this;
    if (typeof chunk.model === 'string') chunk.model = shape.alias;
    if (shape.hideUsage) delete chunk.usage;
    return JSON.stringify(chunk);
  }
}

/** `[DONE]`, passed on as is: the terminal event. */
function doneEvent(sse: SseEvent): StreamEvent {
  return { sse, texts: NO_TEXTS, terminal: true };
}

/**
 * The counts of an OpenAI `usage` block; null when there is none. A count it does not validly give
 * (tokenCount) stays undefined, for stage meter to estimate: never 0, which would bill nothing.
 * A `total_tokens` above prompt + completion means tokens billed beside `completion_tokens`
 * (xAI's reasoning tokens), billed as output: output is then total − prompt. OpenAI's total is the sum.
 */
export function chatUsage(value: unknown, partial: boolean): UpstreamUsage | null {
  if (!isRecord(value)) return null;
  const inputTokens = tokenCount(value.prompt_tokens);
  let outputTokens = tokenCount(value.completion_tokens);
  const total = tokenCount(value.total_tokens);
  if (inputTokens !== undefined && outputTokens !== undefined && total !== undefined && total > inputTokens + outputTokens) outputTokens = total - inputTokens;
  return { inputTokens, outputTokens, partial };
}

/**
 * Drops each choice's `logprobs` from a chat answer (left null, as when none were asked for): the
 * answer's text again, token by token with its alternatives, which output rules cannot check as a
 * text nor mask. Only called under output rules; without them logprobs pass as they came.
 */
export function dropLogprobs(choices: unknown): boolean {
  if (!Array.isArray(choices)) return false;
  let dropped = false;
  for (const choice of choices) {
    if (isRecord(choice) && choice.logprobs !== undefined && choice.logprobs !== null) {
      choice.logprobs = null;
      dropped = true;
    }
  }
  return dropped;
}

async function* chatEvents(ctx: PipelineContext, response: UpstreamResponse, shape: ChatStreamShape, source: ChatStreamSource): AsyncGenerator<StreamEvent> {
  const { upstream } = source;
  const finished = new Set<unknown>();
  const seen = new Set<unknown>();
  /**
   * The last chunk was usage alone and every choice sent had finished before it: the end of a
   * stream whose upstream ignored `n` (sent fewer choices than asked), complete without [DONE].
   */
  let closedByUsage = false;
  const complete = (): boolean => finished.size >= source.choices || closedByUsage;
  let done = false;
  /** A usage block came in or after the chunk that finished the last choice: the final one, not a running count. */
  let usageAfterFinish = false;
  /**
   * A usage block came in or after the chunk of the latest finish_reason: with fewer choices
   * finished than asked (an upstream that ignores `n`), only such a block is final, not a running
   * count from the first chunk.
   */
  let usageSinceLatestFinish = false;
  let afterDone: NodeJS.Timeout | undefined;
  try {
    for await (const sse of parseSse(response.body, MAX_SSE_EVENT_BYTES, sseIdleDeadline(response.body, upstream, source.timeoutMs))) {
      // The answer is complete; what follows is drained, not the caller's.
      if (done) continue;
      if (sse.data === '[DONE]') {
        done = true;
        // The last block is final only if it came with or after the finish: usage on the first
        // chunk alone (completion 0) is a running count, [DONE] or not. A stream with no finish_reason
        // at all cannot be judged that way; its last block is taken as it always was.
        if (usageAfterFinish || (finished.size < source.choices && (finished.size === 0 || usageSinceLatestFinish))) finalUsage(ctx);
        afterDone = setTimeout(() => response.body.destroy(), AFTER_DONE_GRACE_MS);
        yield doneEvent(sse);
        continue;
      }
      let chunk: unknown;
      try {
        chunk = JSON.parse(sse.data);
      } catch {
        chunk = undefined;
      }
      if (sse.event === 'error') throw upstreamStreamError(upstream, chunk, source.upstreamKey);
      if (!isRecord(chunk)) {
        // No texts could be found in it: output rules block it rather than relay it unchecked.
        yield { sse, texts: UNREAD_TEXTS };
        continue;
      }
      // OpenAI-compatible servers report mid-stream failures this way: an object (vLLM, LiteLLM,
      // OpenRouter, with a `choices` entry whose finish_reason is "error") or a string (TGI).
      if (chunk.error !== undefined && chunk.error !== null) throw upstreamStreamError(upstream, chunk, source.upstreamKey);
      const choices = chunk.choices;
      if (Array.isArray(choices)) {
        for (const choice of choices) {
          if (!isRecord(choice)) continue;
          seen.add(choice.index ?? 0);
          if (typeof choice.finish_reason === 'string' && choice.finish_reason !== '') {
            finished.add(choice.index ?? 0);
            usageSinceLatestFinish = false;
          }
        }
      }
      closedByUsage = isRecord(chunk.usage) && isUsageOnly(chunk) && finished.size > 0 && finished.size === seen.size;
      const usage = chunk.usage;
      if (isRecord(usage)) {
        // Partial until the stream finishes: vLLM's continuous_usage_stats (and some servers' usage
        // on the first chunk) give running counts on early chunks, each cumulative, so the last
        // block seen holds the final counts only once the stream ended properly (below).
        ctx.upstreamUsage = chatUsage(usage, true);
        if (finished.size >= source.choices) usageAfterFinish = true;
        if (finished.size > 0) usageSinceLatestFinish = true;
        if (shape.hideUsage && isUsageOnly(chunk)) continue;
      }
      // Some servers send the usage chunk without `choices`; OpenAI's SDKs iterate `choices` on every
      // chunk (their stream helpers throw "chunk.choices is not iterable"), so it goes out as OpenAI
      // sends it: `choices: []`.
      const noChoices = chunk.choices === undefined || chunk.choices === null;
      if (noChoices) chunk.choices = [];
      const event = new ChatChunkEvent(sse, chunk, shape);
      if (noChoices) event.dirty = true;
      yield event;
    }
  } catch (err) {
    // A break after [DONE] loses nothing: the caller gets its complete answer.
    if (done) return;
    if (isAbort(err, source.signal)) throw err;
    const failure = streamBreakFailure(err, upstream);
    // Nor does a break (a reset, a stall) once every choice finished: ended as a clean end there is (below).
    if (!isBodyBreak(failure) || !complete()) throw failure;
  } finally {
    clearTimeout(afterDone);
    // Stops the upstream transfer when the pipeline stopped pulling early (caller gone, failure).
    if (!response.body.readableEnded) response.body.destroy();
    ctx.upstreamMs = Math.round((ctx.clock.monotonic() - source.sentAt) * 1000) / 1000;
  }
  if (done) return;
  if (!complete()) {
    // Cut short (a close-delimited body reads as a clean end). Before the first event nothing
    // reached the caller, so another target may still answer.
    throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `Upstream "${upstream}" ended the stream before [DONE].`, { retryable: true });
  }
  // As at [DONE]: the last block seen before the finish may be a running count (usage on the first
  // chunk: completion 0): unless one came with or after the finish it is left partial, and stage
  // meter charges at least the text delivered.
  if (usageAfterFinish || closedByUsage) finalUsage(ctx);
  yield doneEvent(DONE);
}

/**
 * The stream finished properly ([DONE], or every choice's finish_reason before the body ended) and
 * its last usage block came with or after the finish: that block holds the final counts. A stream
 * that never gets here (cut, failed, the caller gone, only a running count) keeps them partial, and
 * stage meter charges at least the text it delivered.
 */
function finalUsage(ctx: PipelineContext): void {
  if (ctx.upstreamUsage !== null) ctx.upstreamUsage.partial = false;
}

/** A failure of the body's transfer (reset, stall), not an error the upstream reported in it. */
function isBodyBreak(failure: ZenovaError): boolean {
  return failure.code === 'ZN_ERR_UPSTREAM_UNAVAILABLE' || failure.code === 'ZN_ERR_UPSTREAM_TIMEOUT';
}

export function chatStreamReply(
  ctx: PipelineContext,
  response: UpstreamResponse,
  alias: string,
  hideUsage: boolean,
  source: ChatStreamSource,
): Extract<UpstreamReply, { kind: 'stream' }> {
  const shape = new ChatStreamShape(alias, hideUsage, callerToolNames(ctx.forwardBody));
  return {
    kind: 'stream',
    status: 200,
    headers: {},
    events: chatEvents(ctx, response, shape, source),
    textEvent(text: string, like: StreamEvent, channel = 0, part = TEXT_PART.content): StreamEvent {
      const base = like instanceof ChatChunkEvent ? like.templateFields() : {};
      const chunk: Record<string, unknown> = { ...base, model: alias, choices: [{ index: channel, delta: partDelta(part, text), logprobs: null, finish_reason: null }] };
      return new ChatChunkEvent({ data: JSON.stringify(chunk) }, chunk, shape, true);
    },
    errorEvent(code: ErrorCode, message: string): StreamEvent {
      return { sse: { event: 'error', data: JSON.stringify(zenovaError(code, message).toBody()) }, texts: NO_TEXTS };
    },
  };
}
