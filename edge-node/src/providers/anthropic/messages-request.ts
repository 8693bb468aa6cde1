/**
 * The Anthropic Messages request as the node reads it: the fields it needs are validated (with
 * bounds), everything else passes through to the upstream untouched, since the upstream is the
 * authority on the rest (tools, images, thinking…), but for the fields refused because the upstream
 * would bill them above the price this node charges (fast mode, per-use-billed server tools, a
 * code execution container, a regional `inference_geo`; on priced requests advisor tools and
 * compaction edits, billedAbovePriceParam) and server-side `fallbacks` (other models, past the key's
 * allowed ones). The caller's text — the system prompt, text and thinking blocks, tool
 * calls' input, tool results' text — is exposed as slots bound to the body that is forwarded, so a
 * guardrail that masks a slot changes what the upstream receives.
 */
import { z } from 'zod';
import type { BilledAbovePrice, PromptCacheTtl, TextSlot } from '../../pipeline/context.js';
import { cappedArray } from '../capped-array.js';
import { speedSchema } from '../openai/chat-request.js';
import { deferJsonValue } from '../deferred-json-texts.js';
import { MAX_DEPTH } from '../json-string-slots.js';
import { markPartial } from '../partial-texts.js';
import { FieldSlot, NotGeneratedSlot, isRecord } from '../text-slot.js';
import { formatIssuePath } from '../../zod-issues.js';

/** Bounds on what the node reads; the body as a whole is already bounded by the HTTP body limit. */
const MAX_MESSAGES = 10_000;
const MAX_BLOCKS = 10_000;
const MAX_MAX_TOKENS = 10_000_000;
const MAX_STOP_SEQUENCES = 64;
const MAX_TOOLS = 10_000;

/**
 * Anthropic's server tools billed per use on top of tokens (web search per search, code execution
 * per container hour), while the node charges only its own per-token price. Web fetch is billed as
 * tokens only; client tools (no type, `custom`, `computer_*`, `bash_*`, …) run on the caller's side.
 */
const PER_USE_BILLED_TOOL = /^(web_search_|code_execution_)/i;
const toolSchema = z.looseObject({
  type: z
    .string()
    .refine((type) => !PER_USE_BILLED_TOOL.test(type), { error: 'no web_search_… or code_execution_… tools: the upstream bills each use on top of the tokens, above the price this node charges' })
    .nullish(),
});

/**
 * Anthropic's advisor tools (`advisor_…`): the advisor is another model, its calls billed at that
 * model's rates and reported only in `usage.iterations`, which the node neither prices nor reads.
 */
const OTHER_MODEL_TOOL = /^advisor_/i;
/**
 * Server-side compaction edits (`compact_…` in `context_management.edits`): the compaction step is
 * an extra pass over the conversation, writing a summary, billed in `usage.iterations` only.
 */
const COMPACTION_EDIT = /^compact/i;

/**
 * A parameter refused on priced requests (stage preauthorise), or undefined: an advisor tool or a
 * compaction edit, whose tokens the upstream bills outside the top-level usage the node charges
 * (docs/billing.md). Refused rather than metered from `usage.iterations`: a compaction reads the
 * conversation a second time and writes a summary no limit of the node's bounds, so no reservation
 * made before forwarding would be sure to cover it.
 */
export function billedAbovePriceParam(request: Record<string, unknown>): BilledAbovePrice | undefined {
  const tools = request.tools;
  if (Array.isArray(tools)) {
    for (const [i, tool] of tools.entries()) {
      if (isRecord(tool) && typeof tool.type === 'string' && OTHER_MODEL_TOOL.test(tool.type)) {
        return { param: `tools[${i}].type`, reason: 'no advisor_… tools for a priced model: the advisor is another model, which the upstream bills at its own rates, above the price this node charges' };
      }
    }
  }
  const management = request.context_management;
  const edits = isRecord(management) ? management.edits : undefined;
  if (Array.isArray(edits)) {
    for (const [i, edit] of edits.entries()) {
      if (isRecord(edit) && typeof edit.type === 'string' && COMPACTION_EDIT.test(edit.type)) {
        return { param: `context_management.edits[${i}].type`, reason: 'no compaction edits for a priced model: the upstream bills the compaction step on top of the request\'s tokens, above what this node charges; compact the conversation on the client side' };
      }
    }
  }
  return undefined;
}

const textBlock = z.looseObject({ type: z.literal('text'), text: z.string() });
/** Any block; text blocks are checked to carry text, other kinds are the upstream's business. */
const contentBlock = z
  .looseObject({ type: z.string().min(1).max(64), text: z.unknown().optional() })
  .refine((block) => block.type !== 'text' || typeof block.text === 'string', { message: 'a text block needs a string "text"', path: ['text'] });
const content = z.union([z.string(), cappedArray(contentBlock, { max: MAX_BLOCKS })]);

const messageSchema = z.looseObject({
  role: z.enum(['user', 'assistant']),
  content,
});

export const messagesRequestSchema = z.looseObject({
  model: z.string().min(1).max(256),
  max_tokens: z.int().min(1).max(MAX_MAX_TOKENS),
  messages: cappedArray(messageSchema, { min: 1, max: MAX_MESSAGES }),
  system: z.union([z.string(), cappedArray(textBlock, { max: MAX_BLOCKS })]).optional(),
  stream: z.boolean().optional(),
  metadata: z.looseObject({ user_id: z.string().max(256).nullish() }).optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().min(0).max(1).optional(),
  top_k: z.int().min(0).max(1_000_000).optional(),
  stop_sequences: z.array(z.string().max(1024)).max(MAX_STOP_SEQUENCES).optional(),
  // Fast mode is billed above the price this node charges (chat-request.ts, speedSchema).
  speed: speedSchema,
  // Inference pinned to a region ("us") is billed 1.1× the whole request.
  inference_geo: z.literal('global', { error: 'only "global": inference in one region is billed above the price this node charges' }).nullish(),
  tools: cappedArray(toolSchema, { max: MAX_TOOLS }).optional(),
  // A container is where code execution runs (with its files and skills), billed by the hour.
  container: z.null({ error: 'not passed on: a container runs code execution, which the upstream bills by the hour on top of the tokens, above the price this node charges' }).optional(),
  // Server-side fallbacks (with their `server-side-fallback…` beta, messages.ts) name models the
  // upstream serves when the routed one fails: past the key's allowed models, priced as the alias.
  fallbacks: z.null({ error: 'not passed on: it names models the upstream would serve instead of the alias, past the models this key may use and the price this node charges' }).optional(),
  // The MCP connector: the upstream would call the MCP servers named here itself, outside the
  // tool servers this key may use (allowedToolServers, the /mcp surface) and their records.
  mcp_servers: z.null({ error: 'not passed on: the upstream would call these MCP servers itself, outside the tool servers this key may use; use the node\'s /mcp/{server} surface' }).optional(),
});

export type MessagesRequest = z.infer<typeof messagesRequestSchema>;

/**
 * The longest prompt-cache lifetime the request asks for anywhere (a `cache_control` on the request,
 * a tool, a system block, a content block, a block inside a tool result): `1h` for a `ttl` other
 * than "5m" (Anthropic's longest, and the safe side for any it may add), `5m` for one without;
 * undefined when there is none. Cache writes are billed above the input price (docs/billing.md).
 * Requests are depth-checked on parsing, so the walk is bounded.
 */
export function longestPromptCacheTtl(request: Record<string, unknown>): PromptCacheTtl | undefined {
  let longest: PromptCacheTtl | undefined;
  const visit = (value: unknown): void => {
    if (longest === '1h') return;
    if (Array.isArray(value)) {
      for (const item of value) visit(item);
    } else if (isRecord(value)) {
      const control = value.cache_control;
      if (isRecord(control)) longest = control.ttl === undefined || control.ttl === null || control.ttl === '5m' ? '5m' : '1h';
      for (const key in value) visit(value[key]);
    }
  };
  visit(request);
  return longest;
}

/**
 * Where the request names an uploaded file by its `file_id`, as the field's path
 * (`messages[0].content[1].source.file_id`), or undefined: an `image` or `document` block's
 * `{type:'file', file_id}` source, a `container_upload` block, such a block nested in a tool result
 * or a document, or a `file_id` anywhere else in the system prompt and the messages. A file_id names
 * a file in the operator's upstream account, which every caller of the node shares, so it is refused
 * (ZN_ERR_FILE_ID_NOT_ALLOWED) rather than let one caller's model read another's upload. Not walked:
 * the `input` of tool-use blocks (the caller's own tool's arguments, which may use the name for its
 * own ids). A `file_id` of null (a citation's) names no file. Requests are depth-checked on
 * parsing, so the walk is bounded.
 */
export function fileIdParam(request: Record<string, unknown>): string | undefined {
  const path: PropertyKey[] = [];
  for (const key of ['system', 'messages'] as const) {
    path.push(key);
    if (namesFileId(request[key], path)) return formatIssuePath(path);
    path.pop();
  }
  return undefined;
}

/** Whether `value` holds a non-null `file_id` (see fileIdParam); `path` then leads to it, else is left as it came. */
function namesFileId(value: unknown, path: PropertyKey[]): boolean {
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i += 1) {
      path.push(i);
      if (namesFileId(value[i], path)) return true;
      path.pop();
    }
    return false;
  }
  if (!isRecord(value)) return false;
  if (value.file_id !== undefined && value.file_id !== null) {
    path.push('file_id');
    return true;
  }
  const toolUse = isToolUseBlock(value);
  for (const key in value) {
    if (toolUse && key === 'input') continue;
    path.push(key);
    if (namesFileId(value[key], path)) return true;
    path.pop();
  }
  return false;
}

/** A block calling a tool with an `input`: `tool_use`, and the server's own (`server_tool_use`, `mcp_tool_use`, …). */
export function isToolUseBlock(block: Record<string, unknown>): boolean {
  const type = block.type;
  return typeof type === 'string' && (type === 'tool_use' || type.endsWith('_tool_use')) && Object.hasOwn(block, 'input');
}

/**
 * Keys whose string values in a server tool's result are not text: type tags, ids, codes, opaque
 * encodings. A `data` is opaque only in a base64 source (a plain-text document source's is text).
 */
const OPAQUE_RESULT_KEYS: ReadonlySet<string> = new Set(['type', 'tool_use_id', 'tool_id', 'id', 'encrypted_content', 'encrypted_index', 'file_id', 'error_code', 'media_type', 'signature']);

/**
 * Block types that carry no text for the rules: media and files (`image`, `container_upload`),
 * opaque encodings (`redacted_thinking`), a fallback hop's model names (`fallback`), and tool
 * definitions and references (`tool_addition`, `tool_removal`, `tool_reference`,
 * `mcp_tool_listing`), not checked for the reason a request's `tools` are not (guardrails/README.md).
 */
const TEXTLESS_BLOCK_TYPES: ReadonlySet<string> = new Set(['image', 'container_upload', 'redacted_thinking', 'fallback', 'tool_addition', 'tool_removal', 'tool_reference', 'mcp_tool_listing']);

/**
 * Slots for the text of one citation (also a stream's `citations_delta`): quotes, not the model's
 * words (notGenerated). Every string but type tags, ids and opaque encodings (as in a server
 * tool's result): the quoted text and the names of its source (`cited_text`, `title`,
 * `document_title`, `url`, a `search_result_location`'s `source`), and the fields of a location
 * type the node does not know (a `file_location`'s `file_name`), which a fixed list let through.
 */
export function citationSlots(citation: Record<string, unknown>, into: TextSlot[]): void {
  resultSlots(citation, into, 0, NotGeneratedSlot);
}

/**
 * Slots for the citations of a text block (its `citations`, when it has any). A shape Anthropic never
 * sends — `citations` one object or a string instead of a list, an entry that is not an object —
 * has every string in it checked the same way (before, it went on unread).
 */
export function textBlockCitationSlots(block: Record<string, unknown>, into: TextSlot[]): void {
  const citations = block.citations;
  if (!Array.isArray(citations)) {
    citationValueSlots(block, 'citations', into);
    return;
  }
  for (let i = 0; i < citations.length; i += 1) citationValueSlots(citations as unknown as Record<string, unknown>, String(i), into);
}

/** Slots for `holder[key]`, a citation (citationSlots), or the strings of another shape in its place (a stream's `citations_delta.citation` too). */
export function citationValueSlots(holder: Record<string, unknown>, key: string, into: TextSlot[]): void {
  const citation = holder[key];
  if (isRecord(citation)) citationSlots(citation, into);
  else resultValueSlots(holder, key, into, 0, NotGeneratedSlot);
}

/**
 * A server tool's result: `web_search_tool_result`, `web_fetch_tool_result`, `mcp_tool_result`, any
 * `*_tool_result` but the client's `tool_result`, and a payload item (`web_search_result`, …) met
 * outside one. Not `search_result`, a block the caller gives.
 */
function isServerResult(type: string): boolean {
  return type.endsWith('_result') && type !== 'tool_result' && type !== 'search_result';
}

/**
 * Slots for the text in `blocks` (a request's content, or an answer's): text blocks and their
 * citations (the quoted text, the cited source's title and URL), thinking
 * blocks (reasoning), the strings inside tool-use blocks' `input` (what the model passed a tool;
 * deferred until guardrails have rules to check them with, deferred-json-texts.ts), the text
 * inside the client's tool results (`tool_result`: a string or blocks), every string inside a
 * server tool's result (resultSlots), search results (title, source and text), documents
 * given as plain text or as content blocks (title, context and text), a compaction's summary
 * (`content`), and every string inside a block of a type the node does not know (fail closed; not
 * TEXTLESS_BLOCK_TYPES). Opaque fields (signatures, encrypted content, base64 data, file ids) are not text.
 */
export function contentBlockSlots(blocks: unknown[], into: TextSlot[], depth = 0): void {
  for (let i = 0; i < blocks.length; i += 1) {
    const block: unknown = blocks[i];
    if (isRecord(block)) blockSlots(block, into, depth);
    // A block that is not an object (an answer's `["…"]`; a request's is refused by the schema): its strings are text all the same.
    else resultValueSlots(blocks as unknown as Record<string, unknown>, String(i), into, depth, FieldSlot);
  }
}

/**
 * Slots for the text in one block (see contentBlockSlots); also a stream's content_block_start.
 * Results nest blocks in blocks: past MAX_DEPTH levels (an upstream's answer is not depth-checked
 * as a request is) the list is marked partial, so guardrails with rules fail closed rather than the
 * walk running out of stack.
 */
export function blockSlots(block: Record<string, unknown>, into: TextSlot[], depth = 0): void {
  const type = block.type;
  if (depth > MAX_DEPTH) {
    markPartial(into);
    return;
  }
  if (typeof type !== 'string') {
    // No type to read it by (an answer's; a request's is refused by the schema): every string in
    // it, a type of another shape included, is checked, as in a block of an unknown type.
    unknownBlockSlots(block, into, depth);
    if (typeof type === 'object' && type !== null) resultValueSlots(block, 'type', into, depth, FieldSlot);
    return;
  }
  if (type === 'text') {
    if (typeof block.text === 'string') into.push(new FieldSlot(block, 'text'));
    textBlockCitationSlots(block, into);
    otherKeySlots(block, into, depth, ['text'], ['citations']);
  } else if (type === 'thinking') {
    if (typeof block.thinking === 'string') into.push(new FieldSlot(block, 'thinking'));
    otherKeySlots(block, into, depth, ['thinking']);
  }
  // A compaction's summary, written by the model and sent back by the client; its encrypted_content and signature are opaque.
  else if (type === 'compaction') {
    if (typeof block.content === 'string') into.push(new FieldSlot(block, 'content'));
    otherKeySlots(block, into, depth, ['content']);
  } else if (isToolUseBlock(block)) {
    deferJsonValue(into, block, 'input');
    otherKeySlots(block, into, depth, [], ['input']);
  } else if (type === 'tool_result') {
    contentSlots(block, into, 'content', depth);
    otherKeySlots(block, into, depth, [], ['content']);
  } else if (isServerResult(type)) resultSlots(block, into, depth);
  else if (type === 'search_result' || type === 'document') {
    for (const field of ['title', 'context'] as const) if (typeof block[field] === 'string') into.push(new FieldSlot(block, field));
    contentSlots(block, into, 'content', depth);
    const source = block.source;
    // A search result's source is a string (its URL or name); a document's, an object.
    if (typeof source === 'string') into.push(new FieldSlot(block, 'source'));
    else if (isRecord(source)) documentSourceSlots(source, into, depth + 1);
    else resultValueSlots(block, 'source', into, depth, FieldSlot);
    // `citations` here is the caller's setting (`{enabled: true}`): strings in it are checked as other keys' are.
    otherKeySlots(block, into, depth, ['title', 'context'], ['content', 'source']);
  } else if (!TEXTLESS_BLOCK_TYPES.has(type)) unknownBlockSlots(block, into, depth);
  else textlessBlockOtherSlots(block, type, into, depth);
}

/**
 * Slots for a document's source: a plain-text source's `data`, a content source's blocks, and
 * strings under any other key of it (`{type: 'text', data, note}`), which reach the upstream all
 * the same (before, only the payload was read). A PDF's base64 `data` and a URL source's `url`
 * are not text.
 */
function documentSourceSlots(source: Record<string, unknown>, into: TextSlot[], depth: number): void {
  if (source.type === 'text') {
    if (typeof source.data === 'string') into.push(new FieldSlot(source, 'data'));
    otherKeySlots(source, into, depth, ['data']);
  } else if (source.type === 'content') {
    contentSlots(source, into, 'content', depth);
    otherKeySlots(source, into, depth, [], ['content']);
  } else {
    otherKeySlots(source, into, depth, ['data', 'url']);
  }
}

/**
 * What a block of a type carrying no text (TEXTLESS_BLOCK_TYPES) carries besides its payload: an
 * `image`'s `source` (its URL or base64 data, tags, a file id; strings under its other keys are
 * checked), a `redacted_thinking` block's `data`, a `container_upload`'s file id; strings under any
 * other key (`{type:'image', source, title}`) reach the upstream or the caller all the same, so they
 * are checked as a known block's other keys are (before, the whole block went on unread). Tool
 * definitions and references and a fallback's model names stay unread.
 */
function textlessBlockOtherSlots(block: Record<string, unknown>, type: string, into: TextSlot[], depth: number): void {
  if (type === 'image') {
    otherKeySlots(block, into, depth, [], ['source']);
    const source = block.source;
    if (isRecord(source)) otherKeySlots(source, into, depth + 1, ['data', 'url'], []);
    else if (typeof source === 'object' && source !== null) resultValueSlots(block, 'source', into, depth, FieldSlot);
  } else if (type === 'redacted_thinking') {
    otherKeySlots(block, into, depth, ['data'], []);
  } else if (type === 'container_upload') {
    otherKeySlots(block, into, depth, [], []);
  }
}

/**
 * Keys of a block or message that hold no text besides OPAQUE_RESULT_KEYS: a tool's name (in an
 * answer, one the caller's tools do not give is checked apart: unchosenToolNameSlots), cache and error flags.
 */
const NOT_TEXT_KEYS: ReadonlySet<string> = new Set(['name', 'cache_control', 'is_error', 'server_name', 'role']);

/**
 * Slots for every string of `holder` outside what its reading took: the keys in `read` (walked as
 * its type says, whatever their value) and those in `readText` when they are strings (a value of
 * another shape there, an array `text`, is text that reading would miss, so it is walked too).
 * Strings a compatible upstream or proxy adds (LiteLLM's `provider_specific_fields`) are checked
 * like the rest rather than passed on unseen. Exported for the stream's block starts.
 */
export function otherKeySlots(holder: Record<string, unknown>, into: TextSlot[], depth: number, readText: readonly string[], read: readonly string[] = []): void {
  for (const key in holder) {
    if (OPAQUE_RESULT_KEYS.has(key) || NOT_TEXT_KEYS.has(key) || read.includes(key)) continue;
    if (readText.includes(key) && typeof holder[key] === 'string') continue;
    resultValueSlots(holder, key, into, depth, FieldSlot);
  }
}

/**
 * Keys of a Messages answer (JSON, or a stream's message_start `message`) that hold no text or are
 * read (`content`; `stop_sequence` by unchosenStopSequenceSlots).
 */
const ANSWER_KEYS_READ = ['content', 'model', 'stop_reason', 'stop_sequence', 'usage', 'container'];

/**
 * Strings an answer may repeat from the caller's own request: its tools' names (`tools[].name`,
 * which a tool-use block's `name` gives) and its `stop_sequences` (which the answer's
 * `stop_sequence` names when it stopped at one). Output rules leave these alone: the caller wrote
 * them, a mask would rename a tool the client dispatches on or a stop string it compares, and a rule
 * written for conversation (`email`) would refuse ordinary calls (`send_email`). Anything else in
 * those fields is not the caller's, but text the model (or a compatible upstream) wrote, and is
 * checked; only checked (NotGeneratedSlot): neither kept as the answer's text nor estimated as its
 * output, as these fields never were.
 */
export interface CallerChosenStrings {
  toolNames: ReadonlySet<string>;
  stopSequences: ReadonlySet<string>;
}

/** The CallerChosenStrings of `request` (the body forwarded); none for a request without tools or stop sequences. */
export function callerChosenStrings(request: Record<string, unknown> | undefined): CallerChosenStrings {
  const toolNames = new Set<string>();
  const stopSequences = new Set<string>();
  const tools = request?.tools;
  if (Array.isArray(tools)) for (const tool of tools) if (isRecord(tool) && typeof tool.name === 'string') toolNames.add(tool.name);
  const stops = request?.stop_sequences;
  if (Array.isArray(stops)) for (const stop of stops) if (typeof stop === 'string') stopSequences.add(stop);
  return { toolNames, stopSequences };
}

/**
 * A slot for a tool-use block's `name` when it is not one of the caller's tools' names: a name the
 * model made up is its own text (a caller could have it write anything there), which blockSlots,
 * reading `name` as the caller's tool name, does not check. Every string of a name that is not a
 * string is checked too.
 */
export function unchosenToolNameSlots(block: Record<string, unknown>, chosen: CallerChosenStrings, into: TextSlot[]): void {
  if (!isToolUseBlock(block)) return;
  const name = block.name;
  if (typeof name === 'string' && chosen.toolNames.has(name)) return;
  resultValueSlots(block, 'name', into, 0, NotGeneratedSlot);
}

/**
 * A slot for `holder.stop_sequence` (a JSON answer's, a message_start's message, a message_delta's
 * delta) when it is not one of the caller's stop sequences. Anthropic names the caller's own, which
 * is left alone (CallerChosenStrings): a mask there would hide nothing the caller did not send, and
 * that the model reached it is told by `stop_reason` and where the text ends anyway. Another string
 * (a compatible upstream's) is text the caller never chose, so it is checked.
 */
export function unchosenStopSequenceSlots(holder: Record<string, unknown>, chosen: CallerChosenStrings, into: TextSlot[]): void {
  const stop = holder.stop_sequence;
  if (typeof stop === 'string' && chosen.stopSequences.has(stop)) return;
  resultValueSlots(holder, 'stop_sequence', into, 0, NotGeneratedSlot);
}

/**
 * The slots of an answer's (or a message_start message's) fields that repeat what the caller chose,
 * for the values it did not choose: each top-level tool-use block's `name`
 * (unchosenToolNameSlots) and the `stop_sequence` (unchosenStopSequenceSlots).
 */
export function unchosenAnswerSlots(answer: Record<string, unknown>, chosen: CallerChosenStrings, into: TextSlot[]): void {
  if (Array.isArray(answer.content)) for (const block of answer.content) if (isRecord(block)) unchosenToolNameSlots(block, chosen, into);
  unchosenStopSequenceSlots(answer, chosen, into);
}

/**
 * Slots for an answer's (or a message_start message's) `content`: its blocks (contentBlockSlots).
 * Content of a shape Anthropic never sends — a string, one block object — is read as a request's
 * would be (a string as text, an object as a block); before, anything but a list went on unread.
 */
export function answerContentSlots(answer: Record<string, unknown>, into: TextSlot[]): void {
  if (Array.isArray(answer.content)) contentBlockSlots(answer.content, into);
  else contentSlots(answer, into, 'content', -1);
}

/** Slots for the strings of an answer's other keys (LiteLLM's `provider_specific_fields`, …): see otherKeySlots. */
export function otherAnswerKeySlots(answer: Record<string, unknown>, into: TextSlot[]): void {
  otherKeySlots(answer, into, 0, [], ANSWER_KEYS_READ);
}

/**
 * Slots for a block (or a stream's delta) of a type the node does not know (a new one, a compatible
 * upstream's): its text may not pass unseen, so every string in it is checked, skipped only as in a
 * server tool's result (type tags, ids, opaque encodings; fail closed).
 */
export function unknownBlockSlots(block: Record<string, unknown>, into: TextSlot[], depth = 0): void {
  resultSlots(block, into, depth, FieldSlot);
}

/**
 * A string of a server tool's result: not the model's words, and billed by Anthropic as input
 * tokens (the result is fed back to the model), reported only in the final usage.
 */
class ResultSlot extends NotGeneratedSlot {
  readonly billedAsInput = true;
}

/**
 * Slots for every string value inside a server tool's result (`holder`), at any depth, each
 * notGenerated (what a tool fetched or printed, not the model's words). Fails closed: payload
 * shapes grow with each tool version and compatible upstreams' differ, so only OPAQUE_RESULT_KEYS
 * (and a base64 source's `data`) are skipped, and nested blocks (text, documents, citations) are
 * walked the same way. Keys are names, not text. Past MAX_DEPTH levels the list is marked partial.
 */
function resultSlots(holder: Record<string, unknown>, into: TextSlot[], depth: number, Slot: StringSlot = ResultSlot): void {
  const base64 = holder.type === 'base64';
  for (const key in holder) {
    if (OPAQUE_RESULT_KEYS.has(key) || (base64 && key === 'data')) continue;
    resultValueSlots(holder, key, into, depth, Slot);
  }
}

/** The slot made for each string of a walked block: ResultSlot in a server tool's result, FieldSlot in a block of an unknown type. */
type StringSlot = new (holder: Record<string, unknown>, key: string) => TextSlot;

/** Slots for the strings of `holder[key]` inside a server tool's result (see resultSlots); `holder` may be an array. */
function resultValueSlots(holder: Record<string, unknown>, key: string, into: TextSlot[], depth: number, Slot: StringSlot): void {
  const value = holder[key];
  if (typeof value === 'string') {
    into.push(new Slot(holder, key));
    return;
  }
  if (typeof value !== 'object' || value === null) return;
  if (depth >= MAX_DEPTH) {
    markPartial(into);
    return;
  }
  if (Array.isArray(value)) {
    const items = value as unknown as Record<string, unknown>;
    for (let i = 0; i < value.length; i += 1) resultValueSlots(items, String(i), into, depth + 1, Slot);
  } else {
    resultSlots(value as Record<string, unknown>, into, depth + 1, Slot);
  }
}

/** Slots for `holder.content` whether it is a string, blocks, or one block. */
function contentSlots(holder: Record<string, unknown>, into: TextSlot[], key = 'content', depth = 0): void {
  const value = holder[key];
  if (typeof value === 'string') into.push(new FieldSlot(holder, key));
  else if (Array.isArray(value)) contentBlockSlots(value, into, depth + 1);
  else if (isRecord(value)) blockSlots(value, into, depth + 1);
}

/**
 * Every piece of caller text in `body` (the forwarded body), system prompt first, then the
 * messages and the `instructions` of each `context_management` edit (a compaction's, which the
 * model is given when it writes the summary).
 */
export function inputTextSlots(body: Record<string, unknown>): TextSlot[] {
  const into: TextSlot[] = [];
  contentSlots(body, into, 'system');
  const messages = body.messages;
  if (Array.isArray(messages)) {
    for (const message of messages) {
      if (!isRecord(message)) continue;
      contentSlots(message, into);
      // A proxy's additions to a message (LiteLLM's thinking_blocks, provider_specific_fields) go upstream too.
      otherKeySlots(message, into, 0, [], ['content']);
    }
  }
  const management = body.context_management;
  const edits = isRecord(management) ? management.edits : undefined;
  if (Array.isArray(edits)) {
    for (const edit of edits) if (isRecord(edit) && typeof edit.instructions === 'string') into.push(new FieldSlot(edit, 'instructions'));
  }
  return into;
}
