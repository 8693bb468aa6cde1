/**
 * The text of an OpenAI chat message's content parts, for guardrails: a part's `text` and a
 * refusal part's `refusal`; a reasoning part's `thinking`, a string or parts nested in it (Mistral's
 * `{type:'thinking', thinking:[{type:'text', text}]}`), at any depth. Media parts (MEDIA_PART_TYPES:
 * an image or file URL, base64 audio) are not text: only a `text` beside their payload is read, and
 * a file part's `filename` (NameSlot). Strings under a known part's other keys (on the part, in a
 * media payload) are checked as a message's unknown keys are (knownPartOtherSlots). A
 * part of any other type has a shape the node does not know, so none of its text may pass unseen:
 * in a request or JSON answer every string in it (but the `type` tags nested in it) is checked,
 * each whole, and its own `type`, no tag the node knows (unknownTypeSlots); a streamed delta's
 * such part, whose strings may be pieces of a text, is refused under output rules when it carries
 * strings besides `text` and `refusal` (chat-stream.ts, hasUnknownStrings), its `type` included
 * (chat-tool-names.ts, typeHoldsText). A
 * known part whose text field is not text (`{type:'text', text:{…}}`) is read as an unknown one
 * (holdsUnreadText); requests carrying one are refused by the schema (chat-request.ts). A tool
 * call of a type other than `function` and `custom` is read the same way (isKnownToolCall).
 */
import type { TextSlot } from '../../pipeline/context.js';
import { MAX_DEPTH } from '../json-string-slots.js';
import { isPartial, markPartial } from '../partial-texts.js';
import { FieldSlot, RepeatedSlot, isRecord } from '../text-slot.js';

/**
 * Part types whose payload is media (a URL, base64 data), not text. Each has an input allowance
 * (billing/prompt-sections.ts, keyed by MediaPartType: a type added here without one does not compile).
 */
export const MEDIA_PART_TYPES = ['image_url', 'input_audio', 'file', 'video_url', 'audio_url'] as const;
export type MediaPartType = (typeof MEDIA_PART_TYPES)[number];
const MEDIA_PART_TYPE_SET: ReadonlySet<string> = new Set(MEDIA_PART_TYPES);

/** Whether `type` is one of MEDIA_PART_TYPES. */
export function isMediaPartType(type: unknown): type is MediaPartType {
  return typeof type === 'string' && MEDIA_PART_TYPE_SET.has(type);
}
/** Part types whose text fields are known: `text`, `refusal`, `thinking`. */
const TEXT_PART_TYPES: ReadonlySet<string> = new Set(['text', 'refusal', 'thinking']);

/** Whether `part` has a type whose fields are known (a text, refusal, thinking or media part, or one without a type). */
export function isKnownPart(part: Record<string, unknown>): boolean {
  const type = part.type;
  return type === undefined || isMediaPartType(type) || (typeof type === 'string' && TEXT_PART_TYPES.has(type));
}

/** Tool call types whose text fields are known: a function's `arguments`, a custom tool's `input`. */
const TOOL_CALL_TYPES: ReadonlySet<string> = new Set(['function', 'custom']);

/**
 * Whether a tool call has a type whose fields are known (`function`, `custom`, or none: a stream's
 * later fragments, which servers serialising every field send as `"type": null`).
 */
export function isKnownToolCall(call: Record<string, unknown>): boolean {
  const type = call.type;
  return type == null || (typeof type === 'string' && TOOL_CALL_TYPES.has(type));
}

/**
 * A name-like text: a message's `name` (the participant's, rendered into the prompt) or a file
 * part's `filename`. OpenAI takes only names of `[a-zA-Z0-9_-]` (64 at most), so a mask writes each
 * placeholder without its brackets (`EMAIL`, not `[EMAIL]`) to keep a masked name one the upstream
 * takes, and a masked filename a plain one. Counted elsewhere (a name by the prompt's template
 * tokens, a filename by its part's media allowance: billing/prompt-sections.ts), so repeated here:
 * checked, not estimated again.
 */
export class NameSlot extends RepeatedSlot {
  override get text(): string {
    return super.text;
  }

  override set text(value: string) {
    super.text = value === super.text ? value : withoutPlaceholderBrackets(value);
  }
}

/** A detector's placeholder (`[EMAIL]`, `[BANK_CARD]`, `[REDACTED]`…), its name captured. */
const PLACEHOLDER_BRACKETS = /\[([A-Z_]+)\]/g;

/** A masked name with its placeholders written without brackets (`EMAIL`), so it stays of `[a-zA-Z0-9_-]` when it was. */
export function withoutPlaceholderBrackets(masked: string): string {
  return masked.replace(PLACEHOLDER_BRACKETS, '$1');
}

/**
 * Text where OpenAI sends a name or a type tag: a made-up tool name in a JSON answer, a string of a
 * name or tool call of a shape OpenAI never sends (oddShapeSlots), a type no tag the node knows
 * (unknownTypeSlots). Checked, not the answer's text; a mask writes placeholders without brackets.
 */
export class ToolNameSlot extends FieldSlot {
  readonly notGenerated = true;

  override get text(): string {
    return super.text;
  }

  override set text(value: string) {
    super.text = value === super.text ? value : withoutPlaceholderBrackets(value);
  }
}

/** A number where a name (or a part of one) should be: checked as its digits; a mask writes the masked text in its place. */
class NumberNameSlot implements TextSlot {
  readonly notGenerated = true;

  constructor(
    private readonly holder: Record<string, unknown>,
    private readonly key: string,
  ) {}

  get text(): string {
    return String(this.holder[this.key]);
  }

  set text(value: string) {
    if (value !== this.text) this.holder[this.key] = withoutPlaceholderBrackets(value);
  }
}

/**
 * Slots for every string and number in `holder[key]`, `type` keys included: a name, a tool call,
 * `tool_calls` or `function_call` of a shape OpenAI never sends (chat-tool-names.ts), or a type no
 * tag the node knows. Past MAX_DEPTH levels of nesting the list is marked partial (fail closed).
 */
export function oddShapeSlots(holder: Record<string, unknown>, key: string, into: TextSlot[], depth: number): void {
  const value = holder[key];
  if (typeof value === 'string') {
    if (value !== '') into.push(new ToolNameSlot(holder, key));
  } else if (typeof value === 'number') {
    into.push(new NumberNameSlot(holder, key));
  } else if (typeof value === 'object' && value !== null) {
    if (depth > MAX_DEPTH) {
      markPartial(into);
      return;
    }
    const record = value as Record<string, unknown>;
    for (const inner of Object.keys(record)) oddShapeSlots(record, inner, into, depth + 1);
  }
}

/**
 * Slots for the `type` of a content part or tool call of a type the node does not know (in a
 * request or a JSON answer): no tag the node knows, so text like a made-up name (a string, masked
 * without brackets) or an odd shape (anything else: every string and number in it). Its other
 * strings are read by unknownPartSlots, which skips `type` keys as tags.
 */
export function unknownTypeSlots(holder: Record<string, unknown>, into: TextSlot[]): void {
  oddShapeSlots(holder, 'type', into, 1);
}

/**
 * Slots for the text in content `parts` (a message's or a prediction's `content` array; see the
 * file comment). Past MAX_DEPTH levels of nesting the list is marked partial (fail closed).
 */
export function contentPartSlots(parts: unknown[], into: TextSlot[], depth = 0): void {
  if (depth > MAX_DEPTH) {
    markPartial(into);
    return;
  }
  for (let i = 0; i < parts.length; i += 1) {
    const part: unknown = parts[i];
    if (typeof part === 'string') {
      // A bare string among parts: not a shape OpenAI defines, but text all the same.
      into.push(new FieldSlot(parts as unknown as Record<string, unknown>, String(i)));
      continue;
    }
    if (Array.isArray(part)) {
      // Parts nested in an array: not a shape OpenAI defines; every string in them is checked.
      unknownPartSlots(part, into, depth + 1);
      continue;
    }
    if (!isRecord(part)) continue;
    const known = isKnownPart(part);
    if (!known || holdsUnreadText(part)) {
      unknownPartSlots(part, into, depth + 1);
      // A type no tag the node knows is text too; a known part's (its text field of another shape) stays a tag.
      if (!known) unknownTypeSlots(part, into);
      continue;
    }
    if (typeof part.text === 'string') into.push(new FieldSlot(part, 'text'));
    if (typeof part.refusal === 'string') into.push(new FieldSlot(part, 'refusal'));
    knownPartOtherSlots(part, into);
    // A file's name reaches the model with the file.
    if (part.type === 'file' && isRecord(part.file) && typeof part.file.filename === 'string') into.push(new NameSlot(part.file, 'filename'));
    const thinking = part.thinking;
    if (typeof thinking === 'string') into.push(new FieldSlot(part, 'thinking'));
    else if (Array.isArray(thinking)) contentPartSlots(thinking, into, depth + 1);
  }
}

/** Keys of a known content part its reading takes (its text fields), or that carry no text (`type`, `cache_control`). */
const PART_KEYS_READ: ReadonlySet<string> = new Set(['type', 'text', 'refusal', 'thinking', 'cache_control']);

/**
 * Keys of a media part's payload object (`image_url: {url, detail}`…) that carry no text: its URL
 * or base64 data, tags, a file's id; a file's `filename` is read as a NameSlot. Strings only: a
 * value of another shape there is walked.
 */
const MEDIA_PAYLOAD_OPAQUE: OpaquePaths = { url: true, detail: true, data: true, format: true, file_data: true, file_id: true, filename: true };

/**
 * Slots for every string under the keys a known content part's reading does not take (`type` tags
 * nested in them aside): `{type:'text', text, note}`, an `image_url` part's or its payload's extra
 * fields. They reach the upstream (or the caller) all the same, so they are checked as a message's
 * unknown keys are. A media part's payload given as a string (a URL) is its payload, not text.
 */
export function knownPartOtherSlots(part: Record<string, unknown>, into: TextSlot[]): void {
  const type = part.type;
  const payload = isMediaPartType(type) ? type : undefined;
  for (const key in part) {
    if (PART_KEYS_READ.has(key)) continue;
    const value = part[key];
    if (key === payload) {
      if (isRecord(value)) otherKeySlots(value, TYPE_TAG, into, MEDIA_PAYLOAD_OPAQUE);
      else if (typeof value === 'object' && value !== null) unknownPartSlots(value as unknown[], into);
      continue;
    }
    if (typeof value === 'string') {
      // A thinking part's signature (an Anthropic model's, relayed): opaque, sent back as it came.
      if (type !== 'thinking' || key !== 'signature') into.push(new FieldSlot(part, key));
    } else if (typeof value === 'object' && value !== null) {
      unknownPartSlots(value as Record<string, unknown>, into);
    }
  }
}

/** Whether a streamed known content part carries strings under keys its reading does not take (knownPartOtherSlots): text the stream cannot place. */
export function knownPartCarriesOtherText(part: Record<string, unknown>): boolean {
  for (const key in part) {
    if (!PART_KEYS_READ.has(key)) return probe((into) => knownPartOtherSlots(part, into));
  }
  return false;
}

/** Whether `read` finds any text (a slot, or text past the walk's limits). */
function probe(read: (into: TextSlot[]) => void): boolean {
  const into: TextSlot[] = [];
  read(into);
  return into.length > 0 || isPartial(into);
}

/**
 * Slots for every string value inside a part (or tool call) of an unknown type (`type` tags aside),
 * at any depth.
 */
export function unknownPartSlots(holder: Record<string, unknown> | unknown[], into: TextSlot[], depth = 1): void {
  if (depth > MAX_DEPTH) {
    markPartial(into);
    return;
  }
  const record = holder as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    if (key === 'type') continue;
    const value = record[key];
    if (typeof value === 'string') into.push(new FieldSlot(record, key));
    else if (typeof value === 'object' && value !== null) unknownPartSlots(value as Record<string, unknown>, into, depth + 1);
  }
}

/**
 * Whether a part of a known type carries strings in a text field of a shape it does not have (a
 * `text` or `refusal` that is not a string, a `thinking` neither a string nor parts): text the
 * part's reading would miss, so it is read as a part of an unknown type (or blocks a stream).
 */
export function holdsUnreadText(part: Record<string, unknown>): boolean {
  for (const field of ['text', 'refusal'] as const) if (typeof part[field] !== 'string' && carriesStrings(part[field], 1)) return true;
  const thinking = part.thinking;
  return typeof thinking !== 'string' && !Array.isArray(thinking) && carriesStrings(thinking, 1);
}

/**
 * Whether a streamed part of an unknown type carries strings besides its `text` and `refusal`
 * (which the stream reads) and `type` tags: text the stream cannot place in a running text (its
 * own `type` is read by typeHoldsText, chat-tool-names.ts).
 */
export function hasUnknownStrings(part: Record<string, unknown>): boolean {
  for (const key of Object.keys(part)) {
    if (key === 'type' || key === 'text' || key === 'refusal') continue;
    if (carriesStrings(part[key], 1)) return true;
  }
  return false;
}

/**
 * Keys of a chat answer's choice that carry none of the answer's text: its index, why and where it
 * stopped (`stop_reason`/`matched_stop`: the caller's own stop string), Azure's filter verdicts, and
 * `logprobs` (dropped under output rules, keepChecked).
 */
const CHOICE_KEYS_WITHOUT_TEXT: ReadonlySet<string> = new Set(['index', 'finish_reason', 'native_finish_reason', 'stop_reason', 'matched_stop', 'logprobs', 'content_filter_results']);

/**
 * Whether a choice carries strings outside its `textKey` (`delta` in a stream, `message` in a JSON
 * answer) and the keys known to hold no answer text: some OpenAI-compatible servers put the text in
 * `text` or `message` of a streamed chunk. Output rules cannot place it, so they block (fail closed).
 */
export function choiceCarriesOtherText(choice: Record<string, unknown>, textKey: 'delta' | 'message'): boolean {
  for (const key of Object.keys(choice)) {
    if (key === textKey || CHOICE_KEYS_WITHOUT_TEXT.has(key)) continue;
    if (carriesStrings(choice[key], 1)) return true;
  }
  return false;
}

/**
 * Whether a streamed tool call fragment carries strings besides its `type` and `id`: for a call of
 * an unknown type, text the stream cannot place (its `type` is read by unknownCallTypeHoldsText,
 * chat-tool-names.ts).
 */
export function callCarriesStrings(call: Record<string, unknown>): boolean {
  for (const key of Object.keys(call)) {
    if (key === 'type' || key === 'id') continue;
    if (carriesStrings(call[key], 1)) return true;
  }
  return false;
}

/** Whether `value` holds a string at any depth (`type` tags aside); past MAX_DEPTH taken as yes. */
export function carriesStrings(value: unknown, depth: number): boolean {
  if (typeof value === 'string') return true;
  if (typeof value !== 'object' || value === null) return false;
  // Deeper than the walks go: taken as carrying text (fail closed).
  if (depth > MAX_DEPTH) return true;
  const record = value as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    if (key !== 'type' && carriesStrings(record[key], depth + 1)) return true;
  }
  return false;
}

/**
 * Whether a message's (or a stream delta's) `reasoning_details` repeat its reasoning: OpenRouter
 * sends both, `reasoning` the items' text joined. Their slots are then checked but not counted
 * (TextSlot.repeated), or the reasoning would be billed and estimated twice.
 */
export function repeatsReasoning(holder: Record<string, unknown>): boolean {
  return typeof holder.reasoning === 'string' || typeof holder.reasoning_content === 'string';
}

/**
 * Whether a message's (or a stream delta's) `reasoning` repeats its `reasoning_content`: servers
 * that send the same text under both names (vLLM while it renamed the field, mlx-vlm). `reasoning`
 * is then checked but not counted (TextSlot.repeated), or the reasoning would be billed and
 * estimated twice. Compared as given, per message or delta: different texts are both counted.
 */
export function reasoningRepeatsReasoningContent(holder: Record<string, unknown>): boolean {
  return typeof holder.reasoning === 'string' && holder.reasoning === holder.reasoning_content;
}

/**
 * Keys of a chat message (a request's, or an answer's choice message) whose text the node reads
 * (collectMessageTexts, collectAnswerTexts) or that carry none of it (`role`, `tool_call_id`).
 */
const MESSAGE_KEYS_READ: ReadonlySet<string> = new Set([
  'role', 'content', 'name', 'refusal', 'reasoning_content', 'reasoning', 'reasoning_details', 'thinking_blocks',
  'tool_calls', 'function_call', 'tool_call_id', 'audio', 'annotations',
]);

/**
 * Slots for every string under a message's other keys, at any depth (`type` tags aside): fields
 * some OpenAI-compatible servers and proxies add (LiteLLM's `provider_specific_fields`), whose
 * text went to the caller (or the upstream) unchecked.
 */
export function otherMessageFieldSlots(message: Record<string, unknown>, into: TextSlot[]): void {
  otherKeySlots(message, MESSAGE_KEYS_READ, into);
}

/**
 * Keys under a holder's unknown keys whose string is opaque, not text (`true`), or that lead to one
 * (a nested map): read as the rest of their unknown key is, that string aside.
 */
interface OpaquePaths {
  readonly [key: string]: OpaquePaths | true;
}

/**
 * What the node reads of a `function` or `custom` tool call's keys (chat-completions.ts
 * toolCallSlots, a JSON answer's names in chat-tool-names.ts, the stream in chat-stream.ts), and
 * which strings under its other keys are opaque. `id` and the `type` tag carry no text; `index` is
 * no key the node reads (a number is never text; a string there is). Servers put a Gemini thought
 * signature beside a call (Gemini's `extra_content.google.thought_signature`, LiteLLM's
 * `provider_specific_fields.thought_signature`, on the call or its `function`): encrypted
 * reasoning state the upstream wants back byte for byte, never text, as a reasoning item's
 * `signature` is not; checked, every Gemini tool call's stream would be blocked under output rules.
 */
interface CallKeys {
  readonly read: ReadonlySet<string>;
  readonly opaque?: OpaquePaths;
}
const THOUGHT_SIGNATURE: OpaquePaths = { provider_specific_fields: { thought_signature: true } };
const CALL_KEYS: Record<'call' | 'function' | 'custom', CallKeys> = {
  call: { read: new Set(['id', 'type', 'function', 'custom', 'name']), opaque: { ...THOUGHT_SIGNATURE, extra_content: { google: { thought_signature: true } } } },
  // A call's `function` object, or a legacy `function_call`.
  function: { read: new Set(['name', 'arguments']), opaque: THOUGHT_SIGNATURE },
  custom: { read: new Set(['name', 'input']) },
};
/** Keys nested in an unknown key that carry no text: `type` tags (as unknownPartSlots reads them). */
const TYPE_TAG: ReadonlySet<string> = new Set(['type']);

/**
 * Slots for every string under the other keys of a `function` or `custom` tool call
 * (`holder` the call itself), of its `function` / `custom` object, or of a legacy `function_call`
 * (`holder` that object), as for a message's other keys (a proxy's note): text the upstream or the
 * caller reads, which went unchecked. Thought signatures aside (CallKeys).
 */
export function otherToolCallKeySlots(holder: Record<string, unknown>, of: keyof typeof CALL_KEYS, into: TextSlot[]): void {
  const { read, opaque } = CALL_KEYS[of];
  otherKeySlots(holder, read, into, opaque);
}

/**
 * Slots for every string under the keys of `holder` that `read` does not hold, at any depth (`type`
 * tags nested in them aside), but the strings `opaque` names.
 */
function otherKeySlots(holder: Record<string, unknown>, read: ReadonlySet<string>, into: TextSlot[], opaque?: OpaquePaths): void {
  for (const key in holder) {
    if (read.has(key)) continue;
    const value = holder[key];
    const inner = opaque?.[key];
    if (typeof value === 'string') {
      if (inner !== true) into.push(new FieldSlot(holder, key));
    } else if (typeof value === 'object' && value !== null) {
      if (inner === undefined || inner === true) unknownPartSlots(value as Record<string, unknown>, into);
      else otherKeySlots(value as Record<string, unknown>, TYPE_TAG, into, inner);
    }
  }
}

/**
 * Whether a streamed fragment of a `function` or `custom` tool call (or a legacy `function_call`:
 * `of` 'function') carries strings under keys the stream does not read, on the call or in its
 * `function` / `custom` object (`type` tags nested in them and thought signatures aside): text it
 * cannot place in a running text, so output rules block the chunk, as for a delta's unknown keys.
 */
export function toolCallCarriesOtherText(holder: Record<string, unknown>, of: 'call' | 'function'): boolean {
  const keys = CALL_KEYS[of];
  if (carriesOtherText(holder, keys.read, keys.opaque)) return true;
  if (of === 'function') return false;
  const { function: fn, custom } = CALL_KEYS;
  return (isRecord(holder.function) && carriesOtherText(holder.function, fn.read, fn.opaque)) || (isRecord(holder.custom) && carriesOtherText(holder.custom, custom.read));
}

function carriesOtherText(holder: Record<string, unknown>, read: ReadonlySet<string>, opaque?: OpaquePaths): boolean {
  for (const key in holder) {
    if (read.has(key)) continue;
    const value = holder[key];
    const inner = opaque?.[key];
    if (inner === true && typeof value === 'string') continue;
    if (inner !== undefined && inner !== true && isRecord(value)) {
      if (carriesOtherText(value, TYPE_TAG, inner)) return true;
    } else if (carriesStrings(value, 1)) {
      return true;
    }
  }
  return false;
}

/**
 * A list of reasoning items the node reads: OpenRouter's `reasoning_details` (`reasoning.text` /
 * `reasoning.summary` items: `text`, `summary`) and LiteLLM's `thinking_blocks` (`[{type:'thinking',
 * thinking, signature}]`, relaying a model's thinking beside `reasoning_content`). An item's text
 * fields are read; its `type` (one of `types`), `id`, `format` (tags) and `signature` (opaque) are
 * not text, nor the `data` of an encrypted item (`encrypted`: `reasoning.encrypted`,
 * `redacted_thinking`), nor its `cache_control`. Every string under another key is checked, and an
 * item's `type` the node does not know is text too (unknownTypeSlots), as for a content part.
 */
interface ReasoningItems {
  readonly text: readonly string[];
  readonly read: ReadonlySet<string>;
  readonly types: ReadonlySet<string>;
  readonly encrypted: string;
}
const ITEM_TAGS: OpaquePaths = { id: true, format: true, signature: true };
const ENCRYPTED_ITEM_TAGS: OpaquePaths = { ...ITEM_TAGS, data: true };
export const REASONING_ITEMS: Record<'reasoning_details' | 'thinking_blocks', ReasoningItems> = {
  reasoning_details: { text: ['text', 'summary'], read: new Set(['type', 'text', 'summary', 'cache_control']), types: new Set(['reasoning.text', 'reasoning.summary', 'reasoning.encrypted']), encrypted: 'reasoning.encrypted' },
  thinking_blocks: { text: ['thinking'], read: new Set(['type', 'thinking', 'cache_control']), types: new Set(['thinking', 'redacted_thinking']), encrypted: 'redacted_thinking' },
};

/**
 * Slots for a message's `reasoning_details` or `thinking_blocks` (`key`; see ReasoningItems), in a
 * request or a JSON answer. Beside a `reasoning` or `reasoning_content` string the items' text
 * repeats it: checked, counted once (RepeatedSlot). One item object in place of the list is read as
 * that item; another shape (a string, a non-object entry) has every string and number in it
 * checked (oddShapeSlots), as a text field's value that is not a string does.
 */
export function reasoningItemSlots(message: Record<string, unknown>, key: keyof typeof REASONING_ITEMS, into: TextSlot[]): void {
  const items = message[key];
  if (items === undefined || items === null) return;
  const kind = REASONING_ITEMS[key];
  const repeated = repeatsReasoning(message);
  if (isRecord(items)) {
    itemSlots(items, kind, repeated, into);
  } else if (Array.isArray(items)) {
    for (let i = 0; i < items.length; i += 1) {
      const item: unknown = items[i];
      if (isRecord(item)) itemSlots(item, kind, repeated, into);
      else oddShapeSlots(items as unknown as Record<string, unknown>, String(i), into, 1);
    }
  } else {
    oddShapeSlots(message, key, into, 0);
  }
}

function itemSlots(item: Record<string, unknown>, kind: ReasoningItems, repeated: boolean, into: TextSlot[]): void {
  for (const field of kind.text) if (typeof item[field] === 'string') into.push(repeated ? new RepeatedSlot(item, field) : new FieldSlot(item, field));
  itemOtherSlots(item, kind, into);
}

/** Slots for what an item carries besides its string text fields (see ReasoningItems). */
function itemOtherSlots(item: Record<string, unknown>, kind: ReasoningItems, into: TextSlot[]): void {
  for (const field of kind.text) if (typeof item[field] !== 'string') oddShapeSlots(item, field, into, 1);
  const type = item.type;
  if (type !== undefined && type !== null && !(typeof type === 'string' && kind.types.has(type))) unknownTypeSlots(item, into);
  otherKeySlots(item, kind.read, into, type === kind.encrypted ? ENCRYPTED_ITEM_TAGS : ITEM_TAGS);
}

/**
 * Whether a streamed delta's `reasoning_details` or `thinking_blocks` carry text the stream does not
 * place in an item's running text: the list not an array (with strings or numbers in it), an entry
 * that is not an object, or an item's text besides its string text fields (itemOtherSlots).
 * Output rules block such a chunk.
 */
export function reasoningItemsCarryOtherText(delta: Record<string, unknown>, key: keyof typeof REASONING_ITEMS): boolean {
  const items = delta[key];
  if (items === undefined || items === null) return false;
  if (!Array.isArray(items)) return probe((into) => oddShapeSlots(delta, key, into, 0));
  const kind = REASONING_ITEMS[key];
  for (let i = 0; i < items.length; i += 1) {
    const item: unknown = items[i];
    if (isRecord(item) ? probe((into) => itemOtherSlots(item, kind, into)) : probe((into) => oddShapeSlots(items as unknown as Record<string, unknown>, String(i), into, 1))) return true;
  }
  return false;
}

/** Keys of a message's `audio` its reading takes: `transcript`. */
const AUDIO_KEYS_READ: ReadonlySet<string> = new Set(['transcript']);
/** An audio's `id` and its `data` (base64 speech, which blocks an answer under output rules: collectAnswerTexts): no text when strings. */
const AUDIO_TAGS: OpaquePaths = { id: true, data: true };

/**
 * Slots for a message's `audio` (an answer's, or an assistant message sent back, which OpenAI
 * takes as `{id}`): its `transcript`, the answer's words, and every string under its other keys but
 * its `id` (`expires_at` is a number). A transcript, or the `audio` itself, of a shape OpenAI never
 * sends (not a string, not an object) has every string and number in it checked (oddShapeSlots);
 * before, it went on unread. In a request its `data` (base64 speech) is media, as an `input_audio`
 * part's is.
 */
export function audioSlots(message: Record<string, unknown>, into: TextSlot[]): void {
  const audio = message.audio;
  if (!isRecord(audio)) {
    oddShapeSlots(message, 'audio', into, 0);
    return;
  }
  if (typeof audio.transcript === 'string') into.push(new FieldSlot(audio, 'transcript'));
  else oddShapeSlots(audio, 'transcript', into, 1);
  otherKeySlots(audio, AUDIO_KEYS_READ, into, AUDIO_TAGS);
}

/** Keys of a streamed delta whose text the stream reads (chat-stream.ts) or that carry none (`role`). */
const DELTA_KEYS_READ: ReadonlySet<string> = new Set(['role', 'content', 'refusal', 'reasoning_content', 'reasoning', 'reasoning_details', 'thinking_blocks', 'tool_calls', 'function_call', 'audio', 'annotations']);

/**
 * Whether a streamed delta carries strings under other keys (LiteLLM's `thinking_blocks`,
 * `provider_specific_fields`): text the stream cannot place in a running text, so output rules
 * block the chunk (fail closed) rather than relay it unchecked.
 */
export function deltaCarriesOtherText(delta: Record<string, unknown>): boolean {
  for (const key in delta) {
    if (!DELTA_KEYS_READ.has(key) && carriesStrings(delta[key], 1)) return true;
  }
  return false;
}
