/**
 * The parts of a prompt its text list (ctx.inputTexts, what guardrails read) leaves out, estimated
 * so the credit reservation covers them (docs/billing.md, "Prompt estimate"): the chat template's
 * tokens around every message and before the answer (role markers, separators, a message's `name`,
 * ids of tool calls and results), tool and function definitions and a structured-output schema
 * (their JSON length through the node's text estimate), and images, documents, files, audio and
 * video (a fixed allowance per part: their size in tokens depends on pixels, pages and seconds the
 * node does not decode). The upstream renders all of them into the prompt and bills them as input: without the
 * per-message allowance, thousands of empty messages reserved nothing and cost a lot.
 *
 * Cheap: a few property reads per message and one pass over the messages' content arrays (and an
 * assistant message's tool calls); JSON.stringify runs only on the fields that are there (tools,
 * functions, response_format, tool_choice), never on the whole body, and no text is walked again.
 */
import type { PipelineContext } from '../pipeline/context.js';
import { isMediaPartType } from '../providers/openai/chat-content-parts.js';
import type { MediaPartType } from '../providers/openai/chat-content-parts.js';
import { estimateTokens } from '../providers/token-estimate.js';

/**
 * Input tokens allowed per image: Anthropic's cap for an image it does not downscale (about
 * 1.15 megapixels ≈ 1 600 tokens), and above OpenAI's high-detail count for the largest image it
 * keeps (2048 × 768: 8 tiles × 170 + 85 = 1 445).
 */
export const IMAGE_PART_TOKENS = 1_600;

/**
 * Input tokens allowed per document, file or audio part that is not plain text (a PDF, an uploaded
 * file, an audio clip): about one page of text and its page image. A longer PDF costs more; the
 * excess is charged in full and logged (docs/billing.md).
 */
export const MEDIA_PART_TOKENS = 3_000;

/**
 * Input tokens allowed per video part: a short video at low frame sampling is thousands of tokens
 * (Gemini counts about 263 per second at 1 frame/s; Qwen2-VL on vLLM 256 per pair of 448 × 448
 * frames), so 10 000 covers some 40 s. A longer video costs more: charged in full and logged.
 */
export const VIDEO_PART_TOKENS = 10_000;

/**
 * The allowance of each OpenAI chat media part type (MEDIA_PART_TYPES, the parts the node accepts
 * as media): keyed by their type, so a type added there without an allowance does not compile.
 */
export const CHAT_MEDIA_PART_TOKENS: Readonly<Record<MediaPartType, number>> = {
  image_url: IMAGE_PART_TOKENS,
  file: MEDIA_PART_TOKENS,
  input_audio: MEDIA_PART_TOKENS,
  audio_url: MEDIA_PART_TOKENS,
  video_url: VIDEO_PART_TOKENS,
};

/**
 * Input tokens a chat template adds around each message besides its text and role: OpenAI counts 3
 * ("How to count tokens with tiktoken", OpenAI Cookbook: tokens_per_message = 3, the role's own
 * tokens on top); ChatML (`<|im_start|>`, newline, `<|im_end|>`, newline) and Llama 3
 * (`<|start_header_id|>`, `<|end_header_id|>`, a blank line, `<|eot_id|>`) take 4. The larger, so the
 * reservation over- rather than under-estimates. Anthropic does not publish its figure: the same.
 */
export const MESSAGE_FRAME_TOKENS = 4;

/**
 * Input tokens priming the answer, once per request: OpenAI's 3 (`<|start|>assistant<|message|>`,
 * the Cookbook above); Llama 3's 5 (`<|begin_of_text|>` and the assistant header). The larger.
 */
export const REPLY_PRIMING_TOKENS = 5;

/**
 * Input tokens allowed for the markup around one structured piece of a message: an Anthropic
 * content block, an OpenAI assistant message's tool call (its id, name and arguments are counted
 * besides). Not published by either; a tool call's rendering is at least this.
 */
export const CONTENT_BLOCK_TOKENS = 3;

/** Chat request fields rendered into the prompt that are not messages. */
const CHAT_SECTIONS = ['tools', 'functions', 'response_format', 'tool_choice'] as const;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The JSON of `value` through the node's text estimate; 0 for absent or plain values. */
function jsonTokens(value: unknown): number {
  if (typeof value !== 'object' || value === null) return 0;
  try {
    return estimateTokens(JSON.stringify(value) ?? '');
  } catch {
    return 0;
  }
}

/** An OpenAI content part that is not text: an image, a file (PDF), audio or a video. */
function chatPartTokens(part: unknown): number {
  return isRecord(part) && isMediaPartType(part.type) ? CHAT_MEDIA_PART_TOKENS[part.type] : 0;
}

/** The tokens of a short string the text list leaves out (a role, a name, an id); 0 when it is not a string. */
function labelTokens(value: unknown): number {
  return typeof value === 'string' ? estimateTokens(value) : 0;
}

/**
 * What an OpenAI chat message adds besides its texts: the template's frame, its role, its `name`
 * (the Cookbook's tokens_per_name = 1, plus the name), a tool message's `tool_call_id`, and for each
 * tool call of an assistant message its markup, id and function name (its arguments are in the text list).
 */
function chatMessageTokens(message: Record<string, unknown>): number {
  let tokens = MESSAGE_FRAME_TOKENS + labelTokens(message.role) + labelTokens(message.tool_call_id);
  if (typeof message.name === 'string') tokens += 1 + estimateTokens(message.name);
  const calls = message.tool_calls;
  if (Array.isArray(calls)) {
    for (const call of calls) {
      tokens += CONTENT_BLOCK_TOKENS;
      if (isRecord(call)) tokens += labelTokens(call.id) + (isRecord(call.function) ? labelTokens(call.function.name) : 0);
    }
  }
  return tokens;
}

/**
 * Chat Completions: the template's tokens (the answer's priming, each message's frame, role, name
 * and tool-call ids), tools, functions, response_format, tool_choice, and the messages' non-text parts.
 */
export function chatSectionTokens(body: Record<string, unknown>): number {
  let tokens = REPLY_PRIMING_TOKENS;
  for (const field of CHAT_SECTIONS) tokens += jsonTokens(body[field]);
  const messages = body.messages;
  if (Array.isArray(messages)) {
    for (const message of messages) {
      if (!isRecord(message)) continue;
      tokens += chatMessageTokens(message);
      const content = message.content;
      if (Array.isArray(content)) for (const part of content) tokens += chatPartTokens(part);
    }
  }
  return tokens;
}

/**
 * What an Anthropic content block adds besides its texts: its markup (CONTENT_BLOCK_TOKENS) and the
 * ids and tool name the text list leaves out (`id`, `name`, `tool_use_id`); for an image, or a
 * document that is not plain text or content blocks (those are in the text list already), the
 * media allowance. A tool result's own blocks are looked into (a tool may return an image).
 */
function anthropicBlockTokens(block: unknown, nested: boolean): number {
  if (!isRecord(block)) return 0;
  let tokens = CONTENT_BLOCK_TOKENS + labelTokens(block.id) + labelTokens(block.name) + labelTokens(block.tool_use_id);
  if (block.type === 'image') return tokens + IMAGE_PART_TOKENS;
  if (block.type === 'document') {
    const source = block.source;
    const textual = isRecord(source) && (source.type === 'text' || source.type === 'content');
    return textual ? tokens : tokens + MEDIA_PART_TOKENS;
  }
  if (!nested && block.type === 'tool_result' && Array.isArray(block.content)) {
    for (const inner of block.content) tokens += anthropicBlockTokens(inner, true);
  }
  return tokens;
}

/**
 * Anthropic Messages: the template's tokens (the answer's priming, a frame and the role per message,
 * a frame for the system prompt, markup and ids per content block), tools, tool_choice, and image
 * and document blocks (also inside tool results).
 */
export function messagesSectionTokens(body: Record<string, unknown>): number {
  let tokens = REPLY_PRIMING_TOKENS + jsonTokens(body.tools) + jsonTokens(body.tool_choice);
  if (body.system !== undefined) tokens += MESSAGE_FRAME_TOKENS;
  if (Array.isArray(body.system)) tokens += body.system.length * CONTENT_BLOCK_TOKENS;
  const messages = body.messages;
  if (Array.isArray(messages)) {
    for (const message of messages) {
      if (!isRecord(message)) continue;
      // The role is `user` or `assistant` (validated): one token each.
      tokens += MESSAGE_FRAME_TOKENS + 1;
      const content = message.content;
      if (Array.isArray(content)) for (const block of content) tokens += anthropicBlockTokens(block, false);
    }
  }
  return tokens;
}

/** The estimated input tokens of ctx's prompt sections outside its text list (0 for other APIs). */
export function promptSectionTokens(ctx: PipelineContext): number {
  const body = ctx.forwardBody;
  if (body === undefined) return 0;
  if (ctx.api === 'chat.completions') return chatSectionTokens(body);
  if (ctx.api === 'messages') return messagesSectionTokens(body);
  return 0;
}
