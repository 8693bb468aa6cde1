/**
 * An Anthropic Messages SSE stream as pipeline StreamEvents. Each upstream event is parsed once:
 * `message_start` carries the input usage (its `model` becomes the caller's alias) and, from a
 * compatible upstream, maybe content (checked whole there, like a JSON answer's),
 * `message_delta` the output usage (`partial` until the one with the stop_reason gives an output
 * count: an earlier one's are running counts, and a final one without a count leaves them running
 * ones, metered as at least the text delivered) and
 * maybe input counters again, each kept until a later event gives it again (stream-usage.ts);
 * either one without `usage` gets the counts the node meters the stream with, and a message_delta
 * whose `usage` lacks a valid `output_tokens` gets that count, its other fields kept (filled-usage.ts),
 * `content_block_start` what a block may already carry (a text or thinking block's opening text, a
 * tool block's `input`; Anthropic's own are empty; a server tool's result, which Anthropic sends
 * whole there, with no deltas), `content_block_delta` the text of a
 * `text_delta`, `thinking_delta` or (JSON, a tool_use block's input in fragments)
 * `input_json_delta`, or the texts of a `citations_delta`'s citation or a `compaction_delta`'s
 * summary, each checked whole (each a slot a guardrail may rewrite, after which `data` is
 * re-serialised, lazily, when written; a delta of a type the node does not know that carries
 * strings makes output rules block the stream), and
 * `message_stop` is terminal: the answer is complete, what follows is drained for at most
 * AFTER_STOP_GRACE_MS and a break after it changes nothing. An upstream that sends no event for the
 * attempt's timeout (SSE comments do not count; a `ping` event does) is cut as
 * ZN_ERR_UPSTREAM_TIMEOUT (parseSse's idle deadline). An upstream `event: error` (whatever
 * its data) or a stream that ends without `message_stop` (unless its final `message_delta`, with the
 * stop_reason, came: the node then adds the message_stop, also when the body resets or stalls
 * there) is a failure (thrown, so the runner ends
 * the caller's stream with an error event; before the first event the attempt fails and, for a
 * stream that just ended or an error that does not blame the request or the node's key
 * (upstreamStreamError, as on the chat path: a rate limit falls back without counting against
 * the target), is retryable: nothing reached the caller). Other data that is not a JSON
 * object is passed on as is, but its texts are unread (UNREAD_TEXTS): output rules block it.
 */
import type { ErrorCode, ZenovaError } from '../../errors.js';
import { zenovaError } from '../../errors.js';
import type { CacheWrites, PipelineContext, PromptCacheTtl, SseEvent, StreamEvent, TextSlot, UpstreamUsage } from '../../pipeline/context.js';
import { isAbort, streamBreakFailure, upstreamErrorTypeStatus, upstreamStreamError } from '../../upstream/upstream-failure.js';
import { resolveDeferredTexts } from '../deferred-json-texts.js';
import { losesStrings, parseAsWritten, stringifyAsWritten } from '../json-string-slots.js';
import { UNREAD_TEXTS, isPartial, markPartial } from '../partial-texts.js';
import { MAX_SSE_EVENT_BYTES, parseSse } from '../sse.js';
import type { SseIdleDeadline } from '../sse.js';
import { FieldSlot, NO_TEXTS, PartSlot, isRecord, optionalTokenCount, tokenCount } from '../text-slot.js';
import { anthropicErrorBody } from './anthropic-errors.js';
import {
  answerContentSlots,
  blockSlots,
  callerChosenStrings,
  citationValueSlots,
  isToolUseBlock,
  otherAnswerKeySlots,
  otherKeySlots,
  textBlockCitationSlots,
  unchosenAnswerSlots,
  unchosenStopSequenceSlots,
  unchosenToolNameSlots,
  unknownBlockSlots,
} from './messages-request.js';
import type { CallerChosenStrings } from './messages-request.js';
import { AnthropicStreamUsage, cacheCreationByTtl, cacheWritesOf } from './stream-usage.js';
import { meteredCounts, recordedCounts } from './filled-usage.js';
import type { AbortSwitch } from '../../pipeline/abort-switch.js';

type Json = Record<string, unknown>;

/**
 * Input tokens as charged: Anthropic's `input_tokens` leaves out tokens written to or read from
 * the prompt cache, which are input all the same. Undefined (to be estimated) when any of the
 * three is invalid: an invalid cache counter read as 0 would leave those tokens unbilled.
 */
export function anthropicInputTokens(usage: Json): number | undefined {
  const base = tokenCount(usage.input_tokens);
  const creation = optionalTokenCount(usage.cache_creation_input_tokens);
  const read = optionalTokenCount(usage.cache_read_input_tokens);
  if (base === undefined || creation === undefined || read === undefined) return undefined;
  return base + creation + read;
}

/** The part of a JSON answer's input written to the prompt cache, by lifetime (cacheWritesOf); undefined when none or unknown. */
export function anthropicCacheWrites(usage: Json, ttl: PromptCacheTtl | undefined): CacheWrites | undefined {
  const creation = optionalTokenCount(usage.cache_creation_input_tokens);
  if (creation === undefined) return undefined;
  const { fiveMinute, oneHour } = cacheCreationByTtl(usage);
  return cacheWritesOf(creation, fiveMinute, oneHour, ttl);
}

/** One parsed event; `sse` is the upstream's text until something rewrote the parsed JSON. */
export class AnthropicStreamEvent implements StreamEvent {
  texts: TextSlot[] = NO_TEXTS;
  dirty = false;
  terminal?: true;
  /** Set on an event whose tool input or whole texts are slots (those parts end in it), and on every citations_delta (it ends no running text). */
  endsText?: readonly number[];
  /** The whole texts of the event (a server tool's result, a citation), written into `parsed` when serialised. */
  wholeTexts?: WholeTextSlot[];
  private wire: SseEvent;
  /**
   * A message_delta without `usage`, or whose `usage` lacks a valid output count (filled-usage.ts):
   * the counts it gets, worked out afresh at each read of `sse` (an output guard reads its name
   * before the text it held goes out), so the one written carries the counts as they stand when it
   * goes out.
   */
  fillUsage?: () => Json;

  constructor(
    upstream: SseEvent,
    readonly parsed: Json,
    /** Whether the parse dropped strings of the data (parseAsWritten's answer); worked out when unknown. */
    private readonly lostStrings?: boolean,
  ) {
    this.wire = upstream;
  }

  /** The content block a text delta belongs to (text a guardrail adds goes to the same block). */
  get index(): number {
    return typeof this.parsed.index === 'number' ? this.parsed.index : 0;
  }

  keepChecked(): void {
    if (!this.dirty && (this.lostStrings ?? losesStrings(this.wire.data, this.parsed))) this.dirty = true;
  }

  get sse(): SseEvent {
    if (this.wholeTexts !== undefined) for (const slot of this.wholeTexts) slot.commit();
    if (this.fillUsage !== undefined) {
      this.parsed.usage = this.fillUsage();
      this.dirty = true;
    }
    if (this.dirty) {
      // Integers past 2^53 the parse read as their digits go out as the numbers they were.
      this.wire = { event: this.wire.event ?? String(this.parsed.type), data: stringifyAsWritten(this.parsed) };
      this.dirty = false;
    }
    return this.wire;
  }
}

/** The text field of each delta type that carries text; `partial_json` is JSON (a tool_use block's input, in fragments). */
const DELTA_TEXT_FIELDS: Readonly<Record<string, string>> = { text_delta: 'text', thinking_delta: 'thinking', input_json_delta: 'partial_json' };
/** TextSlot.part of a tool_use block's `partial_json` (the block index is its channel). */
const TOOL_INPUT_PART = 1;
/** TextSlot.part of the `input` a tool_use block starts with (whole; Anthropic's is `{}`). */
const TOOL_START_INPUT_PART = 2;
/**
 * TextSlot.channel of the texts an event carries whole (a server tool's result, a citation): no
 * running text uses it (the text and thinking deltas are channel 0, a tool block's input its
 * block index), so ending it in their event (endsText) flushes nothing a block still holds, and
 * a match split across the text deltas around a citation stays one.
 */
const WHOLE_TEXT_CHANNEL = -1;
/** The delta type that continues each block type a content_block_start opens with text. */
const BLOCK_DELTA_TYPES: Readonly<Record<string, string>> = { text: 'text_delta', thinking: 'thinking_delta', tool_use: 'input_json_delta', server_tool_use: 'input_json_delta', mcp_tool_use: 'input_json_delta' };

/** Per event type, the keys its reading covers (or that hold no text: `index`, `usage`). */
const EVENT_KEYS_READ: Readonly<Record<string, ReadonlySet<string>>> = {
  message_start: new Set(['type', 'message']),
  message_delta: new Set(['type', 'delta', 'usage']),
  content_block_start: new Set(['type', 'index', 'content_block']),
  content_block_delta: new Set(['type', 'index', 'delta']),
  content_block_stop: new Set(['type', 'index']),
};
/** Per event type, the key of the object its reading takes (read only when it is an object). */
const EVENT_PAYLOAD_KEYS: Readonly<Record<string, string>> = { message_start: 'message', message_delta: 'delta', content_block_start: 'content_block', content_block_delta: 'delta' };
const NOTHING_READ: ReadonlySet<string> = new Set();
/** A message_delta's `delta` keys: why it stopped (`stop_sequence`: the caller's own stop string, else checked) and the code container. */
const MESSAGE_DELTA_KEYS: ReadonlySet<string> = new Set(['stop_reason', 'stop_sequence', 'container']);

/** The keys each known delta type's reading covers (its text field; `type`). */
const DELTA_KEYS: Readonly<Record<string, ReadonlySet<string>>> = {
  text_delta: new Set(['type', 'text']),
  thinking_delta: new Set(['type', 'thinking']),
  input_json_delta: new Set(['type', 'partial_json']),
  signature_delta: new Set(['type', 'signature']),
  citations_delta: new Set(['type', 'citation']),
  compaction_delta: new Set(['type', 'content']),
};
const TYPE_ONLY: ReadonlySet<string> = new Set(['type']);

/**
 * Whether `holder` carries strings under keys outside `known` (type tags, ids and opaque encodings
 * aside, as unknownBlockSlots skips them): text the reading of its type would relay unseen.
 */
function carriesOtherStrings(holder: Json, known: ReadonlySet<string>): boolean {
  let others: Json | undefined;
  for (const key in holder) if (!known.has(key)) (others ??= {})[key] = holder[key];
  if (others === undefined) return false;
  const found: TextSlot[] = [];
  unknownBlockSlots(others, found);
  return found.length > 0 || isPartial(found);
}

/**
 * The slots of a content_block_delta's text, if it carries any; a `citations_delta`'s citation is
 * checked whole. A delta of a known type with strings beside its field (or its field not a string
 * but holding strings: `text: ["…"]`, which SDKs join into the text) is unread: output rules
 * block it rather than relay text they never saw.
 */
function deltaSlots(delta: Json, event: AnthropicStreamEvent): TextSlot[] {
  const type = typeof delta.type === 'string' ? delta.type : '';
  const known = Object.hasOwn(DELTA_KEYS, type) ? DELTA_KEYS[type] : undefined;
  if (known !== undefined && carriesOtherStrings(delta, known)) return UNREAD_TEXTS;
  if (type === 'citations_delta') {
    // Set even without texts: a text-less event that names no channels would end the block's text.
    event.endsText = [WHOLE_TEXT_CHANNEL];
    const fields: TextSlot[] = [];
    // A citation of another shape (a string, a list) has its strings checked whole the same way.
    citationValueSlots(delta, 'citation', fields);
    return fields.length === 0 ? NO_TEXTS : wholeTextSlots(fields, event);
  }
  if (type === 'compaction_delta') {
    // It carries the block's whole summary (SDKs assign it, not append): checked whole in this event.
    return typeof delta.content === 'string' ? wholeTextSlots([new FieldSlot(delta, 'content')], event, true) : NO_TEXTS;
  }
  const field = Object.hasOwn(DELTA_TEXT_FIELDS, type) ? DELTA_TEXT_FIELDS[type] : undefined;
  if (field === undefined) return OPAQUE_DELTA_TYPES.has(type) ? NO_TEXTS : unknownDeltaTexts(delta);
  if (typeof delta[field] !== 'string') return carriesOtherStrings(delta, TYPE_ONLY) ? UNREAD_TEXTS : NO_TEXTS;
  if (type === 'input_json_delta') return [new PartSlot(delta, field, event, event.index, TOOL_INPUT_PART, true)];
  return [new FieldSlot(delta, field, event)];
}

/** Delta types that carry no text: a thinking block's `signature`. */
const OPAQUE_DELTA_TYPES: ReadonlySet<string> = new Set(['signature_delta']);

/**
 * The texts of a delta of a type the node does not know: its strings (but type tags, ids and opaque
 * encodings, as in blockSlots) may be pieces of a running text it cannot place, so when it carries
 * any, the list is partial and output rules block the stream (fail closed, as a chat stream's
 * unknown content part); without strings it is text-less.
 */
function unknownDeltaTexts(delta: Json): TextSlot[] {
  const found: TextSlot[] = [];
  unknownBlockSlots(delta, found);
  return found.length === 0 && !isPartial(found) ? NO_TEXTS : UNREAD_TEXTS;
}

/**
 * A tool block's starting `input` object as one whole JSON text (a JSON part of the block that
 * ends in its own event, see blockStartSlots). Writing it back the same (or '' while a guardrail
 * holds it) leaves the object as it came; other text is parsed into `input`.
 */
class StartInputSlot implements TextSlot {
  readonly part = TOOL_START_INPUT_PART;
  readonly json = true;
  private readonly original: string;
  private current: string;

  constructor(
    private readonly block: Json,
    private readonly owner: AnthropicStreamEvent,
    readonly channel: number,
  ) {
    // As written: an integer past 2^53 the event's parse holds as its digits is a number in this
    // text too, so the guard checks it as one and a masked text keeps it one.
    this.original = this.current = stringifyAsWritten(block.input, owner.parsed);
  }

  get text(): string {
    return this.current;
  }

  set text(value: string) {
    this.current = value;
    if (value === '' || value === this.original) return;
    let input: unknown;
    try {
      // Its integers past 2^53 noted again, so the event (whose parse holds them) writes them as numbers.
      input = parseAsWritten(value).value;
    } catch {
      // A mask cut through JSON that was not an object (then it was checked as one text).
      input = value;
    }
    this.block.input = input;
    this.owner.dirty = true;
  }
}

/**
 * A text an event carries whole (a field of a server tool's result or of a citation: no delta
 * follows), a part of WHOLE_TEXT_CHANNEL that ends in its own event. A guardrail writes it more
 * than once in that event (what it releases, then the rest), so the field is written only when the event is
 * serialised, and only if the final text differs: a text that went through unchanged leaves the
 * event byte for byte as it came. The model did not write it (notGenerated): it is neither kept as
 * response text nor estimated as output tokens.
 */
class WholeTextSlot implements TextSlot {
  readonly channel = WHOLE_TEXT_CHANNEL;
  /** As the field's: a server tool's result is billed as input, a citation is not. */
  readonly billedAsInput: boolean;
  private current: string;

  constructor(
    private readonly field: TextSlot,
    private readonly owner: AnthropicStreamEvent,
    readonly part: number,
    readonly notGenerated: boolean,
  ) {
    this.current = field.text;
    this.billedAsInput = field.billedAsInput === true;
  }

  get text(): string {
    return this.current;
  }

  set text(value: string) {
    this.current = value;
  }

  commit(): void {
    if (this.current === this.field.text) return;
    this.field.text = this.current;
    this.owner.dirty = true;
  }
}

/**
 * `fields` (texts an event carries whole, stand-ins resolved) as WholeTextSlots, each a part of its
 * own that the event ends; not the model's output, unless `asFields` (then each as its field says).
 */
function wholeTextSlots(fields: TextSlot[], event: AnthropicStreamEvent, asFields = false): TextSlot[] {
  const wholeTexts = fields.map((field, i) => new WholeTextSlot(field, event, i, !asFields || field.notGenerated === true));
  // What the walk could not reach makes the stream guard block (fail closed), as in a JSON answer.
  if (isPartial(fields)) markPartial(wholeTexts);
  event.wholeTexts = wholeTexts;
  event.endsText = [WHOLE_TEXT_CHANNEL];
  return wholeTexts;
}

/**
 * The slots of what a content_block_start already carries: a text or thinking block's opening
 * text (the start of the block's text) and a text block's citations (each text checked whole), a
 * tool block's `input` (a JSON part checked whole: the event ends it) and its `name` when none of
 * the caller's tools has it (a whole text: unchosenToolNameSlots). Anthropic sends '', `{}`
 * and no citations there, which make no slot. Any other block (a server tool's result:
 * `web_search_tool_result`, `web_fetch_tool_result`, `mcp_tool_result`, …) comes whole, with no
 * deltas: its texts, as a JSON answer's (blockSlots: every string in it but opaque ids and
 * encodings), are parts of their own, each checked whole in this event, which ends them.
 */
function blockStartSlots(block: Json, event: AnthropicStreamEvent, chosen: CallerChosenStrings): TextSlot[] {
  const type = block.type;
  if (type === 'text' || type === 'thinking') {
    const cited: TextSlot[] = [];
    if (type === 'text') textBlockCitationSlots(block, cited);
    // Strings under other keys (or an opening text that is not a string), checked whole here.
    otherKeySlots(block, cited, 0, [type], ['citations']);
    const opening = typeof block[type] === 'string' && block[type] !== '' ? [new FieldSlot(block, type, event)] : NO_TEXTS;
    return cited.length === 0 ? opening : [...opening, ...wholeTextSlots(cited, event)];
  }
  if (isToolUseBlock(block)) {
    const other: TextSlot[] = [];
    otherKeySlots(block, other, 0, [], ['input']);
    // Rare (Anthropic's carry none): blocked rather than checked beside the input's own part.
    if (other.length > 0 || isPartial(other)) return UNREAD_TEXTS;
    // A name none of the caller's tools has is the model's own text: checked whole in this event,
    // on the channel of whole texts, beside the input's own part (which the event ends too).
    const named: TextSlot[] = [];
    unchosenToolNameSlots(block, chosen, named);
    if (isPartial(named)) return UNREAD_TEXTS;
    const name = named.length > 0 ? wholeTextSlots(named, event, true) : NO_TEXTS;
    if (!hasContent(block.input)) return name;
    event.endsText = name === NO_TEXTS ? [event.index] : [WHOLE_TEXT_CHANNEL, event.index];
    return [...name, new StartInputSlot(block, event, event.index)];
  }
  const fields: TextSlot[] = [];
  blockSlots(block, fields);
  // A tool call nested in another block (a client tool_result's content; a server result's strings
  // are walked whole) is a stand-in until walked; whole texts are checked in this event.
  resolveDeferredTexts(fields);
  if (fields.length === 0 && !isPartial(fields)) return NO_TEXTS;
  return wholeTextSlots(fields, event);
}

/**
 * The slots of the content a message_start already carries (Anthropic's is `[]`; a compatible
 * upstream may fill it, and SDKs build the final message from it): its blocks' texts as in a JSON
 * answer (blockSlots, tool input walked), each checked whole in this event, which ends them. The
 * model's text stays its output (kept, estimated); citations and tool results do not.
 */
function messageStartSlots(message: Json, event: AnthropicStreamEvent, chosen: CallerChosenStrings): TextSlot[] {
  const fields: TextSlot[] = [];
  answerContentSlots(message, fields);
  // And the strings of its other keys (a proxy's provider_specific_fields), checked whole too.
  otherAnswerKeySlots(message, fields);
  unchosenAnswerSlots(message, chosen, fields);
  resolveDeferredTexts(fields);
  if (fields.length === 0 && !isPartial(fields)) return NO_TEXTS;
  return wholeTextSlots(fields, event, true);
}

/** Whether `input` is anything but an empty object (Anthropic's placeholder) or absent. */
function hasContent(input: unknown): boolean {
  return input !== undefined && (!isRecord(input) || Object.keys(input).length > 0);
}

/** The delta type that carries text into the block of `like` (a block's delta or start event). */
function deltaTypeOf(like: StreamEvent): string {
  if (!(like instanceof AnthropicStreamEvent)) return 'text_delta';
  const { delta, content_block: block } = like.parsed;
  if (isRecord(delta) && typeof delta.type === 'string' && Object.hasOwn(DELTA_TEXT_FIELDS, delta.type)) return delta.type;
  if (isRecord(block) && typeof block.type === 'string' && Object.hasOwn(BLOCK_DELTA_TYPES, block.type)) return BLOCK_DELTA_TYPES[block.type]!;
  return 'text_delta';
}

/**
 * A content_block_delta event carrying `text` (held back by a guardrail) into the block of `like`,
 * the last text event of that block, as the same kind of delta (text, thinking or tool input JSON).
 */
export function deltaEventLike(text: string, like: StreamEvent): StreamEvent {
  const index = like instanceof AnthropicStreamEvent ? like.index : 0;
  const type = deltaTypeOf(like);
  const delta: Json = { type, [DELTA_TEXT_FIELDS[type]!]: text };
  const event = new AnthropicStreamEvent({ event: 'content_block_delta', data: '' }, { type: 'content_block_delta', index, delta });
  event.dirty = true;
  event.texts = deltaSlots(delta, event);
  return event;
}

/** The `event: error` Anthropic sends mid-stream, with our code; the SDK raises it as an APIError. */
export function errorStreamEvent(code: ErrorCode, message: string, failure?: ZenovaError): StreamEvent {
  // An upstream's own error type (overloaded_error, rate_limit_error) goes on, not the node's 502 api_error.
  const status = failure === undefined ? undefined : upstreamErrorTypeStatus(failure);
  return { sse: { event: 'error', data: JSON.stringify(anthropicErrorBody(code, message, status)) }, texts: NO_TEXTS };
}

/**
 * The upstream's counts so far. `partial` stays true until the message_delta with the stop_reason
 * brings the final output count (StreamState): message_start's output_tokens is a placeholder (1),
 * an earlier message_delta's a running count, so a stream cut before message_delta (or whose final
 * message_delta gives no output count) is
 * metered from the text delivered instead, its input with the server tool results delivered
 * (billed as input, counted only in message_delta; stage meter). A count still unknown (no valid
 * `input_tokens` yet; no valid output count in message_delta) is undefined: stage meter estimates it.
 */
function usageOf(ctx: PipelineContext): UpstreamUsage {
  ctx.upstreamUsage ??= { inputTokens: undefined, outputTokens: undefined, partial: true };
  return ctx.upstreamUsage;
}

/**
 * Content after a message_delta's count (a compatible upstream's, even after the stop_reason delta):
 * that count is a running one, and a count taken as final is so no longer, so stage meter bills the
 * larger of it and the estimate of what was delivered.
 */
function contentAfterCounts(ctx: PipelineContext, state: StreamState): void {
  state.lastDeltaCounted = false;
  if (ctx.upstreamUsage !== undefined && ctx.upstreamUsage !== null) ctx.upstreamUsage.partial = true;
}

/** What a stream's events said so far about its end and its counts. */
interface StreamState {
  /** A message_delta with the stop_reason came: every block of the answer is complete. */
  finished: boolean;
  /**
   * The last message_delta gave a valid output count and no content came after it: at
   * message_stop that count is final also when no delta named a stop_reason (a compatible
   * upstream's `"stop_reason": null`).
   */
  lastDeltaCounted: boolean;
  /** The last valid `input_tokens` an event gave, as the caller's SDK keeps it (without the cache counters). */
  inputTokens: number | undefined;
}

/**
 * The `usage` of a message_delta that has none (filled-usage.ts): the output as stage meter records
 * it now (recordedCounts, the meter's own function: with partial upstream counts, the larger of the
 * running count and the estimate), and the input only where the record's differs from the count the
 * caller has (none given, or a partial one the meter adds delivered server tool results to), as an
 * `input_tokens` that, with the cache counters the caller keeps, makes the record's.
 */
function filledDeltaUsage(ctx: PipelineContext, counts: AnthropicStreamUsage, state: StreamState): Json {
  const recorded = recordedCounts(ctx);
  const had = counts.inputTokens;
  if (had === recorded.inputTokens) return { output_tokens: recorded.outputTokens };
  const cached = had === undefined || state.inputTokens === undefined ? 0 : had - state.inputTokens;
  return { input_tokens: recorded.inputTokens - cached, output_tokens: recorded.outputTokens };
}

/**
 * The `usage` a message_delta sent without a valid `output_tokens` (filled-usage.ts), in place:
 * `output_tokens` becomes the record's (filledDeltaUsage), every other field the upstream sent
 * stays as it came, and an `input_tokens` it left out is filled as for a delta without usage (so
 * `usage: {}` reads as none). The object itself is kept, so its integers past 2^53 (parseAsWritten)
 * still go out as written.
 */
function withFilledOutput(given: Json, filled: Json, inputLeftOut: boolean): Json {
  given.output_tokens = filled.output_tokens;
  // Worked out afresh at each read (fillUsage), so an input filled at an earlier read is replaced or dropped.
  if (inputLeftOut) {
    if (filled.input_tokens === undefined) delete given.input_tokens;
    else given.input_tokens = filled.input_tokens;
  }
  return given;
}

/** An event type that may be written as an `event:` line (no line break or other control character can ride in it). */
const EVENT_NAME = /^[a-z_]{1,64}$/;

/** The message_delta events that name the answer's stop_reason: its final delta (by the data's `type`, with or without an `event:` line). */
const finalDeltas = new WeakSet<StreamEvent>();

/**
 * Reads usage (into the stream's running `counts`) and text from one upstream event; the alias goes
 * into `message.model`. `state`: what the events before this one said (updated here but `finished`).
 */
function toStreamEvent(ctx: PipelineContext, counts: AnthropicStreamUsage, sse: SseEvent, source: Pick<StreamOptions, 'upstream' | 'upstreamKey'>, alias: string, chosen: CallerChosenStrings, state: StreamState): StreamEvent {
  // As written: an integer past 2^53 (a tool input's 19-digit card) is read as its digits, which the
  // rules check, not as the double JSON.parse rounds it to while the event's bytes go on unchanged.
  let parsed: unknown;
  let lostStrings: boolean | undefined;
  try {
    const read = parseAsWritten(sse.data);
    parsed = read.value;
    lostStrings = read.losesStrings;
  } catch {
    parsed = undefined;
  }
  // An error event is one whatever its data (JSON or not): never relayed. Classified as on the
  // chat path: retryable (a rate limit without counting against the target) unless it blames the request or the node's key.
  if (sse.event === 'error' || (isRecord(parsed) && parsed.type === 'error')) throw upstreamStreamError(source.upstream, parsed, source.upstreamKey);
  // No texts could be found in it: output rules block it rather than relay it unchecked.
  if (!isRecord(parsed)) return { sse, texts: UNREAD_TEXTS };
  const type = typeof parsed.type === 'string' ? parsed.type : sse.event;
  // A compatible server that sends data lines only: the caller's SDK reads events by their `event:`
  // line (Anthropic's always match the data's type), so the node writes it.
  const event = new AnthropicStreamEvent(sse.event === undefined && typeof parsed.type === 'string' && EVENT_NAME.test(parsed.type) ? { ...sse, event: parsed.type } : sse, parsed, lostStrings);
  switch (type) {
    case 'message_start': {
      const message = parsed.message;
      if (isRecord(message)) {
        if (typeof message.model === 'string' && message.model !== alias) {
          message.model = alias;
          event.dirty = true;
        }
        if (isRecord(message.usage)) {
          const usage = usageOf(ctx);
          counts.update(message.usage);
          state.inputTokens = tokenCount(message.usage.input_tokens) ?? state.inputTokens;
          usage.inputTokens = counts.inputTokens;
          usage.cacheWrites = counts.cacheWrites;
          usage.outputTokens = counts.outputTokens;
        } else {
          // None (a compatible upstream): the prompt's estimate the node meters it with; output 0 until message_delta.
          message.usage = { input_tokens: meteredCounts(ctx).inputTokens, output_tokens: 0 };
          event.dirty = true;
        }
        event.texts = messageStartSlots(message, event, chosen);
      }
      break;
    }
    case 'message_delta':
      if (isRecord(parsed.delta)) {
        if (typeof parsed.delta.stop_reason === 'string') finalDeltas.add(event);
        // A stop_sequence the caller did not send (a compatible upstream's text): checked whole here.
        const stop: TextSlot[] = [];
        unchosenStopSequenceSlots(parsed.delta, chosen, stop);
        if (stop.length > 0 || isPartial(stop)) event.texts = wholeTextSlots(stop, event, true);
      }
      // Cumulative counts; newer upstreams repeat the input counts here too, each counter only where it applies.
      if (isRecord(parsed.usage)) {
        const usage = usageOf(ctx);
        counts.updateFinal(parsed.usage);
        state.inputTokens = tokenCount(parsed.usage.input_tokens) ?? state.inputTokens;
        usage.outputTokens = counts.finalOutputTokens;
        usage.inputTokens = counts.inputTokens;
        usage.cacheWrites = counts.cacheWrites;
        // Final only when this delta gives the output count with (or after) the stop_reason: an
        // earlier message_delta's counts are running ones, and text after them must still be metered
        // (stage meter: the larger of the running count and the estimate), whether the stream breaks
        // or its final delta comes without a count.
        state.lastDeltaCounted = tokenCount(parsed.usage.output_tokens) !== undefined;
        if (state.lastDeltaCounted && (state.finished || finalDeltas.has(event))) usage.partial = false;
        // Usage without a valid output count (`{}`, input counters only, a string): the SDKs read
        // `output_tokens` of every message_delta all the same (filled-usage.ts).
        if (!state.lastDeltaCounted) {
          const given = parsed.usage;
          const inputLeftOut = given.input_tokens === undefined;
          event.fillUsage = () => withFilledOutput(given, filledDeltaUsage(ctx, counts, state), inputLeftOut);
        }
      } else {
        state.lastDeltaCounted = false;
        event.fillUsage = () => filledDeltaUsage(ctx, counts, state);
      }
      break;
    case 'content_block_start': {
      const block = parsed.content_block;
      if (isRecord(block)) event.texts = blockStartSlots(block, event, chosen);
      contentAfterCounts(ctx, state);
      break;
    }
    case 'content_block_delta': {
      const delta = parsed.delta;
      if (isRecord(delta)) event.texts = deltaSlots(delta, event);
      contentAfterCounts(ctx, state);
      break;
    }
    case 'message_stop':
      event.terminal = true;
      // The answer is whole: the output count the last message_delta gave, with no content after
      // it, is final, also when no delta named a stop_reason (a compatible upstream's
      // `"stop_reason": null`). A count only an earlier delta gave stays a running one (partial).
      if (state.lastDeltaCounted) usageOf(ctx).partial = false;
      break;
  }
  // Strings anywhere the reading above does not look (an event of a type it does not know, a key a
  // compatible upstream adds to a known one, a message_delta's own text): unread, so output rules
  // block the stream (fail closed) rather than relay them unchecked.
  // So is the object an event's reading takes (its message, block or delta) sent as a string or a list.
  const keysRead = type !== undefined && Object.hasOwn(EVENT_KEYS_READ, type) ? EVENT_KEYS_READ[type]! : TYPE_ONLY;
  const payload = type !== undefined && Object.hasOwn(EVENT_PAYLOAD_KEYS, type) ? EVENT_PAYLOAD_KEYS[type]! : undefined;
  const oddPayload = payload !== undefined && !isRecord(parsed[payload]) && carriesOtherStrings({ [payload]: parsed[payload] }, NOTHING_READ);
  if (event.texts !== UNREAD_TEXTS && (oddPayload || carriesOtherStrings(parsed, keysRead) || (type === 'message_delta' && isRecord(parsed.delta) && carriesOtherStrings(parsed.delta, MESSAGE_DELTA_KEYS)))) {
    event.texts = UNREAD_TEXTS;
  }
  return event;
}

export interface StreamOptions {
  ctx: PipelineContext;
  upstream: string;
  /** The node's key for the upstream: an error it reports in the stream never quotes it (upstreamStreamError). */
  upstreamKey?: string | undefined;
  /** The alias the caller asked for, shown in `message.model`. */
  alias: string;
  /** monotonic ms when the request went upstream (ctx.upstreamMs is measured from it). */
  sentAt: number;
  /** Releases the upstream body (the consumer stopped early, or the stream failed). */
  release: () => void;
  signal: AbortSwitch;
  /** The longest gap allowed between two events (sseIdleDeadline: the attempt's timeout). */
  idle: SseIdleDeadline;
}

/**
 * How long the rest of the body may take once `message_stop` was read: it is drained (so the
 * connection stays reusable) but an upstream that stalls there does not hold back the caller's
 * message_stop (as chat-stream.ts does after `[DONE]`).
 */
const AFTER_STOP_GRACE_MS = 1000;

/** The caller-facing events of one upstream stream (see the file comment). */
export async function* anthropicStreamEvents(body: AsyncIterable<Uint8Array>, opts: StreamOptions): AsyncGenerator<StreamEvent> {
  const { ctx, upstream, alias } = opts;
  let stopped = false;
  let received = false;
  const state: StreamState = { finished: false, lastDeltaCounted: false, inputTokens: undefined };
  let afterStop: NodeJS.Timeout | undefined;
  const counts = new AnthropicStreamUsage(ctx.promptCacheTtl);
  const chosen = callerChosenStrings(ctx.forwardBody);
  try {
    for await (const sse of parseSse(body, MAX_SSE_EVENT_BYTES, opts.idle)) {
      // The answer is complete; what follows is drained, not the caller's.
      if (stopped) continue;
      received = true;
      const event = toStreamEvent(ctx, counts, sse, opts, alias, chosen, state);
      if (finalDeltas.has(event)) state.finished = true;
      if (event.terminal === true) {
        stopped = true;
        afterStop = setTimeout(opts.release, AFTER_STOP_GRACE_MS);
      }
      yield event;
    }
  } catch (err) {
    // A break (or a stall cut by the grace timer) after message_stop loses nothing: the caller gets its complete answer.
    if (stopped) return;
    if (isAbort(err, opts.signal)) throw err;
    const failure = streamBreakFailure(err, upstream);
    // Nor does a break (a reset, a stall) after the final message_delta: the answer is whole, ended
    // as a stream without message_stop is (below), as chat streams end after every finish_reason.
    if (!state.finished || !isBodyBreak(failure)) throw failure;
  } finally {
    clearTimeout(afterStop);
    opts.release();
    ctx.upstreamMs = Math.round((ctx.clock.monotonic() - opts.sentAt) * 1000) / 1000;
  }
  // An Anthropic-compatible server that ends its stream after the final message_delta, without
  // message_stop (which carries nothing): the answer is whole, and the caller's SDK gets the
  // message_stop it waits for (as chat streams get the [DONE] such a server leaves out).
  if (!stopped && state.finished) {
    yield { sse: { event: 'message_stop', data: MESSAGE_STOP_DATA }, texts: NO_TEXTS, terminal: true };
    return;
  }
  if (!stopped) {
    // Cut short (a close-delimited body reads as a clean end). Before the first event nothing
    // reached the caller, so another target may still answer; after it nothing may be retried.
    throw zenovaError('ZN_ERR_UPSTREAM_ERROR', `Upstream "${upstream}" ended the stream before message_stop.`, { retryable: !received });
  }
}

const MESSAGE_STOP_DATA = '{"type":"message_stop"}';

/** A failure of the body's transfer (reset, stall), not an error the upstream reported in it. */
function isBodyBreak(failure: ZenovaError): boolean {
  return failure.code === 'ZN_ERR_UPSTREAM_UNAVAILABLE' || failure.code === 'ZN_ERR_UPSTREAM_TIMEOUT';
}
