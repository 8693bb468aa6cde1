/**
 * The parts of a prompt its text list (ctx.inputTexts, what guardrails read) leaves out, estimated
 * so the credit reservation covers them (docs/billing.md, "Prompt estimate"): tool and function
 * definitions and a structured-output schema (their JSON length through the node's text estimate),
 * and images, documents, files and audio (a fixed allowance per part: their size in tokens depends on
 * pixels and pages the node does not decode). The upstream renders all of them into the prompt and
 * bills them as input.
 *
 * Cheap on requests without them: a few property reads and one pass over the messages' content
 * arrays; JSON.stringify runs only on the fields that are there (tools, functions, response_format,
 * tool_choice), never on the whole body.
 */
import type { PipelineContext } from '../pipeline/context.js';
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

/** An OpenAI content part that is not text: an image, a file (PDF) or audio. */
function chatPartTokens(part: unknown): number {
  if (!isRecord(part)) return 0;
  if (part.type === 'image_url') return IMAGE_PART_TOKENS;
  if (part.type === 'file' || part.type === 'input_audio') return MEDIA_PART_TOKENS;
  return 0;
}

/** Chat Completions: tools, functions, response_format, tool_choice, and the messages' non-text parts. */
export function chatSectionTokens(body: Record<string, unknown>): number {
  let tokens = 0;
  for (const field of CHAT_SECTIONS) tokens += jsonTokens(body[field]);
  const messages = body.messages;
  if (Array.isArray(messages)) {
    for (const message of messages) {
      const content = isRecord(message) ? message.content : undefined;
      if (Array.isArray(content)) for (const part of content) tokens += chatPartTokens(part);
    }
  }
  return tokens;
}

/**
 * An Anthropic content block that is not text: an image, or a document that is not plain text or
 * content blocks (those are in the text list already); a tool result's own blocks are looked into
 * (a tool may return an image).
 */
function anthropicBlockTokens(block: unknown, nested: boolean): number {
  if (!isRecord(block)) return 0;
  if (block.type === 'image') return IMAGE_PART_TOKENS;
  if (block.type === 'document') {
    const source = block.source;
    const textual = isRecord(source) && (source.type === 'text' || source.type === 'content');
    return textual ? 0 : MEDIA_PART_TOKENS;
  }
  if (!nested && block.type === 'tool_result' && Array.isArray(block.content)) {
    let tokens = 0;
    for (const inner of block.content) tokens += anthropicBlockTokens(inner, true);
    return tokens;
  }
  return 0;
}

/** Anthropic Messages: tools, tool_choice, and image and document blocks (also inside tool results). */
export function messagesSectionTokens(body: Record<string, unknown>): number {
  let tokens = jsonTokens(body.tools) + jsonTokens(body.tool_choice);
  const messages = body.messages;
  if (Array.isArray(messages)) {
    for (const message of messages) {
      const content = isRecord(message) ? message.content : undefined;
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
