/**
 * What one request carries through the pipeline (stages.ts). Each stage reads what earlier stages
 * set and sets its own fields; the comment on a field names the stage that sets it. Nothing here
 * is shared between requests: the config is the snapshot taken when the request arrived.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { GuardrailVerdict, RateLimits, RecordStatus, ToolServer, UpstreamAttempt } from '../../../proto/src/index.js';
import type { RuntimeConfig, RuntimeRoute, RuntimeTarget } from '../config/runtime-config.js';
import type { ErrorCode, ZenovaError } from '../errors.js';
import type { Clock } from './clock.js';
import type { PipelineDeps } from './deps.js';
import type { StageName } from './stage.js';
import type { AbortSwitch } from './abort-switch.js';

export type Surface = 'model' | 'tools';
export type ApiKind = 'chat.completions' | 'embeddings' | 'models' | 'messages' | 'mcp';

/**
 * A piece of caller or upstream text a guardrail may read and rewrite (mask). Writing `text`
 * rewrites the body that is forwarded (input) or sent to the caller (output).
 */
export interface TextSlot {
  text: string;
  /**
   * In a stream: which running text the slot continues (the choice index of a chat chunk); absent
   * means 0. Output guardrails check each channel as its own text and release it into its own choice.
   */
  readonly channel?: number;
  /**
   * Which text of the channel the slot continues, numbered by the provider: absent (0) the main
   * text (a choice's content), others e.g. its reasoning or one tool call's arguments. Each part is
   * its own running text; a channel's end (StreamEvent.endsText) ends all its parts.
   */
  readonly part?: number;
  /**
   * The slot is a fragment of JSON text (a tool call's arguments, split anywhere). Output
   * guardrails hold a JSON part whole until it ends, then check the strings inside it and emit it
   * as one fragment.
   */
  readonly json?: boolean;
  /**
   * The slot is a string value of a JSON object read as structured data (tool-call input, MCP
   * params and results): the object key it is the value of, or that holds its array (through
   * nested arrays). Read alone the value has no name, so
   * the secret detector reads the key as an assignment's name (`{"password": "…"}` as `password=…`).
   */
  readonly jsonKey?: string;
  /**
   * The answer carries the text but the model did not write it: a server tool's result (a fetched
   * page, a search hit, a program's output), a citation's quote and its source's names. Guardrails
   * check it like any other text; the runner leaves it out of ctx.responseText, so it is neither
   * kept as the recorded response nor estimated as output tokens (a stream cut before its usage).
   */
  readonly notGenerated?: boolean;
  /**
   * A notGenerated text the upstream bills as input tokens of the answer (a server tool's result,
   * fed back to the model), reported only in its final usage: counted into
   * ctx.deliveredInputTokens, which a stream cut before that usage is metered for.
   */
  readonly billedAsInput?: boolean;
  /**
   * The text repeats another slot of the same message or delta: OpenRouter's `reasoning_details`
   * beside its `reasoning` (or `reasoning_content`), or `reasoning` holding the same text as
   * `reasoning_content` (vLLM during its rename, mlx-vlm). Checked like any other text (a mask lands in
   * both), but counted once: not estimated as input tokens, and notGenerated, so neither kept nor
   * estimated as output.
   */
  readonly repeated?: boolean;
}

/**
 * Input tokens written to Anthropic's prompt cache, by lifetime: counted in the input tokens and
 * billed above the input price on top of it (billing/request-cost.ts, docs/billing.md).
 */
export interface CacheWrites {
  fiveMinuteTokens: number;
  oneHourTokens: number;
}

/** The prompt-cache lifetimes an Anthropic request can ask for (`cache_control.ttl`). */
export type PromptCacheTtl = '5m' | '1h';

/** Token counts of one call. */
export interface Usage {
  inputTokens: number;
  outputTokens: number;
  /** True when the upstream did not give (validly) both counts and the node estimated what it lacked. */
  estimated: boolean;
  /** The part of inputTokens written to the prompt cache, as the upstream counted it; absent when none. */
  cacheWrites?: CacheWrites;
}

/**
 * The counts an upstream's usage block gave, as a provider read them (stage meter turns them into
 * ctx.usage). A count the upstream did not validly give — absent, null, a string, negative,
 * fractional, beyond 2^53 (tokenCount) — is undefined: the meter estimates that count, never 0.
 */
export interface UpstreamUsage {
  inputTokens: number | undefined;
  outputTokens: number | undefined;
  /**
   * True while the counts may still grow: a stream that has not finished (no message_delta with
   * usage yet; an OpenAI-compatible stream before [DONE] or every choice's finish_reason, whose
   * early chunks may carry running counts). A stream left partial is metered as cut short.
   */
  partial: boolean;
  /**
   * The input written to the prompt cache (Anthropic), whenever validly given: also when inputTokens
   * is not (the input is estimated and stage meter holds the writes to the estimate).
   */
  cacheWrites?: CacheWrites;
}

/** One server-sent event as it goes out on the wire: `event:` (optional) and `data:`. */
export interface SseEvent {
  event?: string;
  data: string;
}

/**
 * One upstream stream event as the provider parsed it. `texts` are the text deltas in it: a
 * guardrail that rewrites them makes the provider re-serialise `sse.data` (the framing stays
 * the provider's). `terminal` marks the event that ends the stream for the caller (`data: [DONE]`,
 * Anthropic's `message_stop`): the pipeline sends it only after the record is spooled.
 */
export interface StreamEvent {
  sse: SseEvent;
  texts: TextSlot[];
  terminal?: boolean;
  /**
   * Channels (TextSlot.channel) whose text ends with this event, e.g. a chat chunk whose choice
   * carries finish_reason: text a guardrail still holds for them must go out in or before it.
   * Unset, a text-less event ends every channel (Anthropic's content_block_stop); chat chunks
   * always set it, usually to none.
   */
  endsText?: readonly number[];
  /**
   * Output guardrails call this on every event (with texts or not) before checking its texts: when
   * the upstream's JSON held strings its parsed value lost (a duplicate key: JSON.parse keeps the
   * last), the event goes out re-serialised from what is checked, not as the upstream's bytes; and
   * what the event carries that the rules cannot check but the answer does without (a chat chunk's
   * `logprobs`: the answer's text again, token by token) is dropped.
   */
  keepChecked?(): void;
}

/**
 * A request parameter whose text guardrails cannot check: identify finds it, guardrails-in refuses
 * it (ZN_ERR_GUARDRAIL_UNCHECKABLE) when the key's policy has rules in that direction.
 */
export interface UncheckedParam {
  /** The parameter, as OpenAI's error `param` names it: `input`, `logprobs`, `modalities`. */
  readonly param: string;
  /** What it carries or asks for, for the caller's message: "token ids", "log probabilities". */
  readonly what: string;
}

/** A request parameter refused on priced requests, with why (the message's reason, validateBody's style). */
export interface BilledAbovePrice {
  readonly param: string;
  readonly reason: string;
}

/** What the forward stage obtained from the upstream (or the node itself, e.g. /v1/models). */
export type UpstreamReply =
  | {
      kind: 'json';
      status: number;
      headers: Record<string, string>;
      body: unknown;
      /** Text in `body` an output guardrail may read and rewrite. */
      texts: TextSlot[];
      /**
       * Output guardrails call this before checking `texts` when the direction has rules: `body`
       * drops what the rules cannot check but the answer does without (a chat answer's `logprobs`).
       */
      keepChecked?(): void;
      /**
       * The answer as the upstream wrote it, sent instead of `body` serialised when this returns it
       * (MCP: a tool server's JSON goes on unchanged, 64-bit integers and numbers' form kept,
       * unless something rewrote it). Asked at delivery, after the output guardrails.
       */
      asWritten?(): string | undefined;
      /** See the raw kind's `failure`. */
      failure?: ErrorCode;
    }
  | {
      kind: 'stream';
      status: number;
      headers: Record<string, string>;
      /**
       * The events, pulled by the pipeline as it writes them to the caller. The provider records
       * the upstream's usage into `ctx.upstreamUsage` as it sees it. Guardrails may wrap this.
       */
      events: AsyncIterable<StreamEvent>;
      /**
       * A new text-delta event shaped like `like` carrying `text` (for text a guardrail held back),
       * for `channel` (the choice index; absent: 0) and its `part` (TextSlot.part).
       */
      textEvent(text: string, like: StreamEvent, channel?: number, part?: number): StreamEvent;
      /** An error event in this API's framing, ending the stream with `code` (headers already sent). */
      /** The stream's error event for `code`; `failure`, the error itself, when it has one (an upstream's in-band error keeps its type). */
      errorEvent(code: ErrorCode, message: string, failure?: ZenovaError): StreamEvent;
    }
  | {
      /** Raw bytes relayed as they come (MCP streamable HTTP); no text inspection. */
      kind: 'raw';
      status: number;
      headers: Record<string, string>;
      body: AsyncIterable<Uint8Array>;
      /**
       * false for a body relayed as it comes (an MCP event stream): every chunk goes out at once,
       * except that an empty chunk marks where what completes the answer starts: it and all that
       * follows wait for the record, in memory, so such a body must bound them (mcp-answer-hold.ts).
       * Otherwise the last chunk is held back until the record is durable.
       */
      holdLast?: boolean;
      /**
       * Set when this is an upstream's error status relayed as it came (a tool server's 4xx, which
       * MCP clients act on): the request is recorded `failed` with this code and the status, not `ok`.
       */
      failure?: ErrorCode;
    };

/** How the request ended, set by the runner. */
export interface Outcome {
  status: RecordStatus;
  httpStatus: number;
  errorCode: ErrorCode | null;
}

/** The caller's key as authenticate found it. */
export interface CallerKey {
  id: string;
  accountId: string | null;
  /** From the bundle; empty objects when none. */
  keyLimits: RateLimits;
  accountLimits: RateLimits;
  guardrailPolicyId: string | null;
  allowedModels: ReadonlySet<string> | null;
  /** null = every tool server. */
  allowedToolServers: ReadonlySet<string> | null;
}

export interface PipelineContext {
  /** Minted by the node (request-id.ts); keys the record and its charge. */
  readonly requestId: string;
  /** The caller's own id (x-client-request-id or x-request-id), recorded beside it; null when none. */
  readonly clientRequestId: string | null;
  readonly api: ApiKind;
  readonly surface: Surface;
  /** Unix ms at arrival (wall clock, for the record). */
  readonly receivedAt: number;
  /** performance.now() at arrival (for durations). */
  readonly startedAt: number;
  readonly http: {
    readonly method: string;
    /** Path without the query string. */
    readonly path: string;
    readonly headers: IncomingHttpHeaders;
    /**
     * The header lines as sent (name, value, name, value…): the caller's key is read from these
     * (auth/api-key-verifier.ts), as the merged `headers` hide repeated Authorization lines.
     */
    readonly rawHeaders: readonly string[];
    /** Route parameters, e.g. { server } for /mcp/:server. */
    readonly params: Readonly<Record<string, string>>;
    /** The JSON body's text as received, kept only for routes that relay it as sent (MCP: http/body-text.ts). */
    readonly bodyText?: string | undefined;
  };
  /** The parsed JSON body as received (undefined for GET). The forward stage sends `forwardBody`. */
  readonly body: unknown;
  readonly deps: PipelineDeps;
  readonly clock: Clock;
  /** Aborted when the caller goes away before the answer is complete. */
  readonly callerGone: AbortSwitch;

  /** identify: the request's config snapshot (absent when the node had none). */
  config?: RuntimeConfig;
  /** identify: the validated request, in the API's own shape, to be forwarded (guardrails may rewrite its texts). */
  forwardBody?: Record<string, unknown>;
  /** identify: the alias asked for (or the tool server for MCP). */
  model: string | null;
  /** identify: whether the caller asked for a stream. */
  stream: boolean;
  /** identify: `max_tokens` (or equivalent) when given. */
  maxOutputTokens: number | null;
  /** identify: a cheap estimate of the prompt's tokens (for limits and pre-authorisation). */
  estimatedInputTokens: number;
  /** identify: the caller's text in the request, for guardrails-in. */
  inputTexts: TextSlot[];
  /** identify: a parameter carrying input the input rules cannot read (embeddings token ids); absent when none. */
  uncheckedInput?: UncheckedParam;
  /** identify: a parameter asking for output the output rules cannot check (chat `logprobs`, audio); absent when none. */
  uncheckedOutput?: UncheckedParam;
  /**
   * identify: a parameter the upstream bills above the model's per-token price (OpenAI audio, an
   * Anthropic advisor tool or compaction edit), or an output limit the node does not set (llama.cpp
   * `n_predict`…) that would lift the one reserved for; absent when none. Refused by stage
   * preauthorise when the request is priced.
   */
  billedAbovePrice?: BilledAbovePrice;
  /**
   * identify: the longest prompt-cache lifetime an Anthropic request asks for (`cache_control`),
   * absent when none: its cache writes are billed above the input price.
   */
  promptCacheTtl?: PromptCacheTtl;

  /** authenticate. */
  key?: CallerKey;
  /**
   * authenticate: the key presented and its account, also when it was refused (revoked, expired, a
   * suspended account's…), for logs and records; only `key` is billed or limited.
   */
  presentedKey?: { id: string; accountId: string | null };

  /** route: the alias's route and the ordered targets to try (chosen weighted target first, then fallbacks). */
  route?: RuntimeRoute;
  plan?: RuntimeTarget[];
  /** route (MCP): the tool server called. */
  toolServer?: ToolServer;

  /** forward: each upstream attempt, in order. */
  attempts: UpstreamAttempt[];
  /** forward: the reply to deliver. */
  reply?: UpstreamReply;
  /**
   * forward: the upstream and model that produced `reply`; what makes the request chargeable. MCP:
   * also a call the tool server got whose answer never came (the caller left, a timeout): the tool
   * server runs it all the same (billing.md, "Tool calls").
   */
  served?: { upstream: string; model: string };
  /** forward/provider: usage as the upstream reported it (updated as a stream goes; `partial` while its final counts have not arrived). */
  upstreamUsage: UpstreamUsage | null;
  /** forward: ms from sending upstream to the first byte back, and to the end. */
  upstreamFirstByteMs: number | null;
  upstreamMs: number | null;
  /**
   * delivery: why a stream's upstream failed after its first event (a stall, a reset, an error it
   * reported); its attempt is then recorded failed and target health counts it (forward-plan.ts).
   */
  upstreamStreamFailure?: ZenovaError;
  /** forward: the response text the model wrote, as delivered (kept for the record; not TextSlot.notGenerated texts), bounded (response-text.ts). */
  responseText: string;
  /**
   * forward: the characters, and their denseTextWeight, of all that text, not only the part kept: what
   * output is estimated from when the upstream gave no usage (stage meter; response-text.ts).
   */
  responseTextChars: number;
  responseTextDenseWeight: number;
  /**
   * guardrails-out: the characters, and their denseTextWeight, of the model's text the output rules saw,
   * counted before they held, masked or blocked any (response-text.ts countGuardedText): output is
   * estimated from the larger of this and the delivered text, so text held or blocked is billed.
   */
  guardedTextChars: number;
  guardedTextDenseWeight: number;
  /**
   * forward: the estimated tokens of the delivered texts the upstream bills as input
   * (TextSlot.billedAsInput: a server tool's results), added to the input of a stream cut before
   * its final usage (stage meter). A count, not the texts.
   */
  deliveredInputTokens: number;

  /** guardrails-in/out: every verdict, in order. */
  guardrails: GuardrailVerdict[];
  /**
   * guardrails-in: the input rules of the key's policy ran over all of the caller's text, so their
   * masks are in the body a record keeps (policy-engine.ts, holdsUnmaskedInput).
   */
  inputChecked?: boolean;

  /** meter: usage to charge (from the upstream, else estimated). */
  usage: Usage;

  /** preauthorise/settle: money, integer micro-units. */
  cost: { reservedMicros: number; costMicros: number; leaseId: string | null; priced: boolean };
  /**
   * preauthorise: resolves once the request's open row is durable (rejects if it cannot be
   * written); forward waits for it, so no upstream call is made that a crash could leave without a
   * record. null when the spool needs no wait (no spool, or one without open rows).
   */
  openRowDurable: Promise<void> | null;

  /** Headers added to the caller's response, success or not (x-ratelimit-*, Retry-After). */
  responseHeaders: Record<string, string>;

  /** runner: time in each stage, microseconds. */
  stagesUs: Partial<Record<StageName, number>>;
  /** runner: how it ended. */
  outcome: Outcome;

  /**
   * runner: set once the head of `reply` (its upstream's headers: an MCP initialize's session id)
   * was written to the caller; never for an answer refused or abandoned before it went out.
   */
  replyHeadSent?: boolean;
  /** Registered by stages (concurrency slots, reservations); the runner runs them all, once, at the very end. */
  cleanups: Array<() => void>;
  /**
   * rate-limit: frees the request's concurrency slot early (releaseConcurrencySlot), once admitted.
   * A field, not a WeakMap keyed by the context: V8's young-generation GC keeps a WeakMap entry's key
   * alive when its value (this closure) refers back to it, so every request's objects outlived it.
   */
  releaseSlot: (() => void) | null;
}
