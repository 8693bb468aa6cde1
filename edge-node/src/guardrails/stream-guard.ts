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
 * carries the tool call's id and name) and the whole text is held until its part ends. Then the
 * strings inside it are checked as whole texts, and the text goes out as one fragment: in the
 * delta of the event that ends it when that event carries one of the part's fragments, else in a
 * new event just before it. It goes out byte for byte as it came unless a mask rewrote it (then it
 * is re-serialised). A JSON part longer than MAX_HELD_JSON_CHARS, or whose strings are nested too
 * deep or are too many to check, is blocked (fail closed). Nothing is held without output rules:
 * the guard is only installed when there are some.
 *
 * On a block the stream throws ZN_ERR_GUARDRAIL_BLOCKED: the runner stops pulling (the upstream
 * call is aborted), ends the caller's stream with `reply.errorEvent` in the API's own framing, and
 * records the code; the blocked text itself is never released.
 */
import { zenovaError } from '../errors.js';
import type { PipelineContext, StreamEvent, TextSlot, UpstreamReply } from '../pipeline/context.js';
import { JsonStringWalk, jsonTextOf } from '../providers/json-string-slots.js';
import { isPartial, uncheckedTextMessage } from '../providers/partial-texts.js';
import type { CompiledPolicy } from './compiled-policy.js';
import { blockedMessage } from './policy-engine.js';
import { TextGuard, VerdictTally } from './text-guard.js';

type StreamReply = Extract<UpstreamReply, { kind: 'stream' }>;

/** A JSON part held longer than this (characters) is blocked: its strings cannot all be checked. */
export const MAX_HELD_JSON_CHARS = 1024 * 1024;

/** One running text of the stream: a part of a channel, its guard (null: a JSON part, held whole) and its last text event (the shape of new deltas). */
interface Channel {
  readonly id: number;
  readonly part: number;
  readonly guard: TextGuard | null;
  /** A JSON part's text so far. */
  json: string;
  lastText: StreamEvent | undefined;
}

/** Wraps `reply.events` with the policy's output rules (the caller checked the side has rules and is not broken). */
export function guardStream(ctx: PipelineContext, policy: CompiledPolicy, reply: StreamReply): void {
  // One tally for all channels: a rule's verdict counts its matches over the whole answer.
  const tally = new VerdictTally(policy.id, 'output', ctx.guardrails);
  reply.events = guardedEvents(reply.events, reply, policy, () => new TextGuard(policy.output, tally));
}

async function* guardedEvents(events: AsyncIterable<StreamEvent>, reply: StreamReply, policy: CompiledPolicy, newGuard: () => TextGuard): AsyncGenerator<StreamEvent> {
  // Keyed by the channel number for the main text (most streams have no other), else by "channel:part".
  const channels = new Map<number | string, Channel>();
  const channelOf = (slot: TextSlot): Channel => {
    const id = slot.channel ?? 0;
    const part = slot.part ?? 0;
    const key = part === 0 ? id : `${id}:${part}`;
    let channel = channels.get(key);
    if (channel === undefined) channels.set(key, (channel = { id, part, guard: slot.json === true ? null : newGuard(), json: '', lastText: undefined }));
    return channel;
  };
  const check = (guard: TextGuard): void => {
    if (guard.blockedBy !== null) throw zenovaError('ZN_ERR_GUARDRAIL_BLOCKED', blockedMessage(policy, guard.blockedBy, 'output'));
  };
  /** A whole JSON part with the strings inside it checked (re-serialised only when a mask rewrote one). */
  const checkedJson = (text: string): string => {
    const holder: Record<string, unknown> = { text };
    const walk = new JsonStringWalk();
    walk.addJsonText(holder, 'text');
    const slots = walk.finish();
    if (isPartial(slots)) throw zenovaError('ZN_ERR_GUARDRAIL_BLOCKED', uncheckedTextMessage(policy.id, 'output'));
    const guard = newGuard();
    guard.wholeTexts(slots);
    check(guard);
    return jsonTextOf(holder, 'text');
  };
  /** What `channel` still holds, checked, now that its text ends ('' when nothing). */
  const rest = (channel: Channel): string => {
    const { guard } = channel;
    if (guard === null) {
      const text = channel.json;
      channel.json = '';
      return text.length === 0 ? '' : checkedJson(text);
    }
    if (!guard.holding) return '';
    const text = guard.end();
    check(guard);
    return text;
  };
  /** Everything `channel` holds, as a new delta of its own (nothing when it holds nothing). */
  const released = (channel: Channel): StreamEvent | undefined => {
    const text = rest(channel);
    return text.length > 0 && channel.lastText !== undefined ? reply.textEvent(text, channel.lastText, channel.id, channel.part) : undefined;
  };

  for await (const event of events) {
    if (event.texts.length === 0) {
      if (event.sse.event !== 'ping') {
        // A chat chunk ends the text of the choices it finishes (often none); text-less events that
        // name no channels (the end of an Anthropic block, the terminal event) end all.
        const only = event.terminal === true || event.endsText === undefined ? null : event.endsText;
        for (const channel of channels.values()) {
          if (only !== null && !only.includes(channel.id)) continue;
          const out = released(channel);
          if (out !== undefined) yield out;
        }
      }
      yield event;
      continue;
    }
    // Channels whose text ends here (all of them at the terminal event, after which nothing may
    // follow): the last slot of each takes what its guard still holds.
    const ending = event.terminal === true ? null : new Set(event.endsText ?? []);
    const lastSlot = new Map<Channel, TextSlot>();
    for (const slot of event.texts) {
      const channel = channelOf(slot);
      const text = slot.text;
      if (channel.guard === null) {
        if (text.length > 0) {
          channel.json += text;
          if (channel.json.length > MAX_HELD_JSON_CHARS) {
            throw zenovaError('ZN_ERR_GUARDRAIL_BLOCKED', `The output holds tool-call arguments longer than ${MAX_HELD_JSON_CHARS} characters, more than guardrail policy "${policy.id}" checks, so it blocks them.`);
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
      const slot = lastSlot.get(channel);
      if (slot === undefined) {
        // An ending channel with no text in this event: its rest goes out just before it.
        const out = released(channel);
        if (out !== undefined) yield out;
      } else {
        const text = rest(channel);
        if (text.length > 0) slot.text += text;
      }
    }
    yield event;
  }
  // The upstream ended without a text-less event after the text: release what is held.
  for (const channel of channels.values()) {
    const out = released(channel);
    if (out !== undefined) yield out;
  }
}
