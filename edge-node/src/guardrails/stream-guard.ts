/**
 * Output rules over a streamed answer, keeping the provider's framing: the guard wraps the reply's
 * events and rewrites each text delta with what its TextGuard can release (held text goes out in
 * later deltas). Each channel (the choice index of `n > 1` chat streams) is its own running text
 * with its own TextGuard, and what it releases goes into its own choice.
 *
 * Held text goes out before its text ends: appended to the delta of an event that ends its channel
 * (a chat chunk carrying finish_reason) or to a terminal event, else in a new delta shaped like the
 * channel's last text event (`reply.textEvent`) just before a text-less event that ends it: the end
 * of a content block, the terminal event, or, for the choices it finishes, a chat chunk with a
 * finish_reason. Other text-less chat chunks (an empty or role-only delta, another choice's
 * tool_calls, a content-filter note) end no text: a match split across one stays whole. Anthropic
 * `ping`s are keep-alives inside a block and do not end the text.
 *
 * Each part of a channel (TextSlot.part: a choice's reasoning, each tool call's arguments) is a
 * running text of its own, ended with its channel. JSON parts (tool-call arguments, Anthropic's
 * `partial_json`) are JSON text split anywhere, escapes included, so their fragments are not
 * checked as they come: each fragment goes out empty (the events keep their framing: the first
 * carries the tool call's id and name) and the whole text is held until its part ends: when a
 * fragment of another JSON part of the channel arrives (a choice's tool calls come one after
 * another, and SDKs take a call as done as soon as the next one starts; providers give a call's
 * first chunk a slot even when it carries no text, e.g. only its id and name), or when the channel ends.
 * Then the strings inside it are checked as whole texts, and the text goes out as one fragment: in
 * the delta of the event that ends it when that event carries one of the part's fragments (before
 * the next part's), else in a new event just before it. A part may end in the event it starts in
 * (endsText of an Anthropic content_block_start whose tool input comes whole): it is checked there. It goes out byte for byte as it came
 * unless a mask rewrote it (then it is re-serialised). More text of a JSON part that ended with
 * some would be checked apart from it, so it is blocked (one that ended empty goes on); so are JSON parts holding more than
 * MAX_HELD_JSON_CHARS in all, or whose strings are nested too deep or are too many to check (fail
 * closed), as is an event whose data the provider could not parse (its texts unread, partial).
 * Every event is first given its keepChecked (re-serialised from what is checked; a chat chunk's
 * logprobs dropped).
 * Ended texts leave the guard's map (only ended JSON parts' keys are kept). Nothing is
 * held without output rules: the guard is only installed when there are some.
 *
 * On a block the stream throws ZN_ERR_GUARDRAIL_BLOCKED: the runner stops pulling (the upstream
 * call is aborted), ends the caller's stream with `reply.errorEvent` in the API's own framing, and
 * records the code; the blocked text itself is never released.
 */
import { zenovaError } from '../errors.js';
import type { PipelineContext, StreamEvent, TextSlot, UpstreamReply } from '../pipeline/context.js';
import { countGuardedText } from '../pipeline/response-text.js';
import { JsonStringWalk, jsonTextOf } from '../providers/json-string-slots.js';
import { isPartial, uncheckedTextMessage } from '../providers/partial-texts.js';
import type { CompiledPolicy } from './compiled-policy.js';
import { blockedMessage } from './policy-engine.js';
import { TextGuard, VerdictTally } from './text-guard.js';

type StreamReply = Extract<UpstreamReply, { kind: 'stream' }>;

/**
 * Characters of JSON parts (tool-call arguments) a stream may hold at once, across all its parts:
 * past it the stream is blocked, since what is held cannot all be checked.
 */
export const MAX_HELD_JSON_CHARS = 1024 * 1024;

/**
 * A fragment of a text held whole and checked as one text when it ends (an OpenAI tool call's
 * name, whose pieces SDKs join: checked piece by piece, `to eve@exa` + `mple.org` passed a mask
 * and `aur` + `ora` a block rule). Each fragment goes out empty; the whole checked text goes into
 * the fragment flagged `endsHeld` (the provider's judgement of where the text ends: its call's
 * arguments start), else into the last fragment in the event that ends its channel, else into a new
 * delta of its part just before that event. Past MAX_HELD_WHOLE_CHARS it is checked and released
 * anyway; more text of it after it ended is blocked, as for a JSON part.
 */
export interface HeldWholeSlot extends TextSlot {
  readonly heldWhole: true;
  readonly endsHeld: boolean;
  /** Whether the whole text goes out unchecked (a tool name the caller's request declares). */
  unchecked(whole: string): boolean;
}

/** The longest text held whole (a tool call's name: OpenAI's are 64 characters at most). */
export const MAX_HELD_WHOLE_CHARS = 256;

function isHeldWhole(slot: TextSlot): slot is HeldWholeSlot {
  return (slot as Partial<HeldWholeSlot>).heldWhole === true;
}

/** One running text of the stream: a part of a channel, its guard (null: a JSON part, held whole) and its last text event (the shape of new deltas). */
interface Channel {
  readonly key: number | string;
  readonly id: number;
  readonly part: number;
  readonly guard: TextGuard | null;
  /** A part held whole (HeldWholeSlot): its `unchecked`; its text so far is `json`. */
  readonly heldWhole: HeldWholeSlot['unchecked'] | null;
  /** A JSON part's (or a part held whole) text so far. */
  json: string;
  lastText: StreamEvent | undefined;
}

/** The key of a channel's part: the channel number for the main text (most streams have no other), else "channel:part". */
function partKey(id: number, part: number): number | string {
  return part === 0 ? id : `${id}:${part}`;
}

/** Wraps `reply.events` with the policy's output rules (the caller checked the side has rules and is not broken). */
export function guardStream(ctx: PipelineContext, policy: CompiledPolicy, reply: StreamReply): void {
  // One tally for all channels: a rule's verdict counts its matches over the whole answer.
  const tally = new VerdictTally(policy.id, 'output', ctx.guardrails);
  reply.events = guardedEvents(ctx, reply.events, reply, policy, () => new TextGuard(policy.output, tally));
}

async function* guardedEvents(
  ctx: PipelineContext,
  events: AsyncIterable<StreamEvent>,
  reply: StreamReply,
  policy: CompiledPolicy,
  newGuard: () => TextGuard,
): AsyncGenerator<StreamEvent> {
  // The running texts that have not ended; one leaves the map when it ends.
  const channels = new Map<number | string, Channel>();
  // Per channel, the JSON part it holds now. A channel's JSON parts come one after another (SDKs
  // take a tool call as done when a fragment of the next one arrives), so a fragment of another
  // JSON part of the channel ends it.
  const openJson = new Map<number, Channel>();
  // JSON parts (and parts held whole) that ended with text, by key only: more text of one could not be checked with its start.
  const endedJson = new Set<number | string>();
  // Characters held in all JSON parts (bounded by MAX_HELD_JSON_CHARS).
  let heldJson = 0;

  const blocked = (message: string): Error => zenovaError('ZN_ERR_GUARDRAIL_BLOCKED', message);
  const channelOf = (slot: TextSlot): Channel => {
    const id = slot.channel ?? 0;
    const part = slot.part ?? 0;
    const key = partKey(id, part);
    let channel = channels.get(key);
    if (channel === undefined) {
      const heldWhole = isHeldWhole(slot) ? (whole: string) => slot.unchecked(whole) : null;
      channels.set(key, (channel = { key, id, part, guard: slot.json === true || heldWhole !== null ? null : newGuard(), heldWhole, json: '', lastText: undefined }));
    }
    return channel;
  };
  const check = (guard: TextGuard): void => {
    if (guard.blockedBy !== null) throw blocked(blockedMessage(policy, guard.blockedBy, 'output'));
  };
  /** A whole JSON part with the strings inside it checked (re-serialised only when a mask rewrote one). */
  const checkedJson = (text: string): string => {
    const holder: Record<string, unknown> = { text };
    const walk = new JsonStringWalk();
    walk.addJsonText(holder, 'text');
    const slots = walk.finish();
    if (isPartial(slots)) throw blocked(uncheckedTextMessage(policy.id, 'output'));
    const guard = newGuard();
    guard.wholeTexts(slots);
    check(guard);
    return jsonTextOf(holder, 'text');
  };
  /** Ends `channel`'s text: it leaves the map, and what it still holds is returned checked ('' when nothing). */
  const end = (channel: Channel): string => {
    channels.delete(channel.key);
    const { guard } = channel;
    if (channel.heldWhole !== null) {
      const text = channel.json;
      channel.json = '';
      if (text.length === 0) return '';
      endedJson.add(channel.key);
      if (channel.heldWhole(text)) return text;
      const whole = newGuard();
      const out = whole.whole(text);
      check(whole);
      return out;
    }
    if (guard === null) {
      if (openJson.get(channel.id) === channel) openJson.delete(channel.id);
      const text = channel.json;
      // A part that ended empty released nothing: text for it later is still its whole text.
      if (text.length > 0) endedJson.add(channel.key);
      heldJson -= text.length;
      channel.json = '';
      return text.length === 0 ? '' : checkedJson(text);
    }
    if (!guard.holding) return '';
    const text = guard.end();
    check(guard);
    return text;
  };
  /**
   * Ends `channel` at the current event: what it holds goes into `slot` (its last slot in that
   * event) when there is one, else into a new delta of its own, returned to go out just before it.
   */
  const endAt = (channel: Channel, slot: TextSlot | undefined): StreamEvent | undefined => {
    const text = end(channel);
    if (text.length === 0) return undefined;
    if (slot !== undefined) {
      slot.text += text;
      return undefined;
    }
    return channel.lastText === undefined ? undefined : reply.textEvent(text, channel.lastText, channel.id, channel.part);
  };

  for await (const event of events) {
    // Counted as it comes, before it is held: what is held when the stream stops is still billed (stage meter).
    countGuardedText(ctx, event.texts);
    // An event whose texts a walk could not all reach (nested too deep) or whose data could not be
    // parsed (UNREAD_TEXTS) is blocked, not passed unchecked.
    if (isPartial(event.texts)) throw blocked(uncheckedTextMessage(policy.id, 'output'));
    // What goes out is what is checked here: not upstream bytes holding more (duplicate keys), nor
    // what the rules cannot check (a chat chunk's logprobs), also in events without texts.
    event.keepChecked?.();
    if (event.texts.length === 0) {
      if (event.sse.event !== 'ping') {
        // A chat chunk ends the text of the choices it finishes (often none); text-less events that
        // name no channels (the end of an Anthropic block, the terminal event) end all.
        const only = event.terminal === true || event.endsText === undefined ? null : event.endsText;
        for (const channel of channels.values()) {
          if (only !== null && !only.includes(channel.id)) continue;
          const out = endAt(channel, undefined);
          if (out !== undefined) yield out;
        }
      }
      yield event;
      continue;
    }
    // New deltas that go out just before this event.
    let before: StreamEvent[] | undefined;
    // Channels whose text ends here (all of them at the terminal event, after which nothing may
    // follow): the last slot of each takes what its guard still holds.
    const ending = event.terminal === true ? null : new Set(event.endsText ?? []);
    const lastSlot = new Map<Channel, TextSlot>();
    for (const slot of event.texts) {
      const text = slot.text;
      if (isHeldWhole(slot)) {
        const key = partKey(slot.channel ?? 0, slot.part ?? 0);
        if (endedJson.has(key)) {
          if (text.length === 0) continue;
          throw blocked(`The output goes on with a tool call's name after it was checked whole, so guardrail policy "${policy.id}" cannot check it as one text and blocks it.`);
        }
        const channel = channelOf(slot);
        if (text.length > 0) {
          channel.json += text;
          slot.text = '';
        }
        if (slot.endsHeld || channel.json.length > MAX_HELD_WHOLE_CHARS) {
          slot.text = end(channel);
          lastSlot.delete(channel);
          continue;
        }
        channel.lastText = event;
        lastSlot.set(channel, slot);
        continue;
      }
      if (slot.json === true) {
        const id = slot.channel ?? 0;
        const part = slot.part ?? 0;
        const open = openJson.get(id);
        if (open !== undefined && open.part !== part) {
          const out = endAt(open, lastSlot.get(open));
          lastSlot.delete(open);
          if (out !== undefined) (before ??= []).push(out);
        }
        if (endedJson.has(partKey(id, part))) {
          // An empty fragment adds nothing; text would be checked apart from the part's start.
          if (text.length === 0) continue;
          throw blocked(`The output goes on with a tool call's arguments after that call ended, so guardrail policy "${policy.id}" cannot check them as one text and blocks them.`);
        }
      }
      const channel = channelOf(slot);
      if (channel.guard === null) {
        openJson.set(channel.id, channel);
        if (text.length > 0) {
          channel.json += text;
          heldJson += text.length;
          if (heldJson > MAX_HELD_JSON_CHARS) {
            throw blocked(`The output holds more than ${MAX_HELD_JSON_CHARS} characters of tool-call arguments at once, more than guardrail policy "${policy.id}" checks, so it blocks them.`);
          }
          slot.text = '';
        }
      } else {
        const out = channel.guard.push(text);
        check(channel.guard);
        if (out !== text) slot.text = out;
      }
      channel.lastText = event;
      lastSlot.set(channel, slot);
    }
    for (const channel of channels.values()) {
      if (ending !== null && !ending.has(channel.id)) continue;
      // An ending channel's rest goes into its last slot in this event, else just before it.
      const out = endAt(channel, lastSlot.get(channel));
      if (out !== undefined) (before ??= []).push(out);
    }
    if (before !== undefined) yield* before;
    yield event;
  }
  // The upstream ended without a text-less event after the text: release what is held.
  for (const channel of channels.values()) {
    const out = endAt(channel, undefined);
    if (out !== undefined) yield out;
  }
}
