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
 * On a block the stream throws ZN_ERR_GUARDRAIL_BLOCKED: the runner stops pulling (the upstream
 * call is aborted), ends the caller's stream with `reply.errorEvent` in the API's own framing, and
 * records the code; the blocked text itself is never released.
 */
import { zenovaError } from '../errors.js';
import type { PipelineContext, StreamEvent, TextSlot, UpstreamReply } from '../pipeline/context.js';
import type { CompiledPolicy } from './compiled-policy.js';
import { blockedMessage } from './policy-engine.js';
import { TextGuard, VerdictTally } from './text-guard.js';

type StreamReply = Extract<UpstreamReply, { kind: 'stream' }>;

/** One running text of the stream: its guard and its last text event (the shape of new deltas). */
interface Channel {
  readonly guard: TextGuard;
  lastText: StreamEvent | undefined;
}

/** Wraps `reply.events` with the policy's output rules (the caller checked the side has rules and is not broken). */
export function guardStream(ctx: PipelineContext, policy: CompiledPolicy, reply: StreamReply): void {
  // One tally for all channels: a rule's verdict counts its matches over the whole answer.
  const tally = new VerdictTally(policy.id, 'output', ctx.guardrails);
  reply.events = guardedEvents(reply.events, reply, policy, () => new TextGuard(policy.output, tally));
}

async function* guardedEvents(events: AsyncIterable<StreamEvent>, reply: StreamReply, policy: CompiledPolicy, newGuard: () => TextGuard): AsyncGenerator<StreamEvent> {
  const channels = new Map<number, Channel>();
  const channelOf = (id: number): Channel => {
    let channel = channels.get(id);
    if (channel === undefined) channels.set(id, (channel = { guard: newGuard(), lastText: undefined }));
    return channel;
  };
  const check = (guard: TextGuard): void => {
    if (guard.blockedBy !== null) throw zenovaError('ZN_ERR_GUARDRAIL_BLOCKED', blockedMessage(policy, guard.blockedBy, 'output'));
  };
  /** Everything `channel` holds, as a new delta of its own (nothing when it holds nothing). */
  const released = (id: number, channel: Channel): StreamEvent | undefined => {
    if (!channel.guard.holding) return undefined;
    const rest = channel.guard.end();
    check(channel.guard);
    return rest.length > 0 && channel.lastText !== undefined ? reply.textEvent(rest, channel.lastText, id) : undefined;
  };

  for await (const event of events) {
    if (event.texts.length === 0) {
      if (event.sse.event !== 'ping') {
        // A chat chunk ends the text of the choices it finishes (often none); text-less events that
        // name no channels (the end of an Anthropic block, the terminal event) end all.
        const only = event.terminal === true || event.endsText === undefined ? null : event.endsText;
        for (const [id, channel] of channels) {
          if (only !== null && !only.includes(id)) continue;
          const rest = released(id, channel);
          if (rest !== undefined) yield rest;
        }
      }
      yield event;
      continue;
    }
    // Channels whose text ends here (all of them at the terminal event, after which nothing may
    // follow): the last slot of each takes what its guard still holds.
    const ending = event.terminal === true ? null : new Set(event.endsText ?? []);
    const lastSlot = new Map<number, TextSlot>();
    for (const slot of event.texts) {
      const id = slot.channel ?? 0;
      const channel = channelOf(id);
      const text = slot.text;
      const out = channel.guard.push(text);
      check(channel.guard);
      if (out !== text) slot.text = out;
      channel.lastText = event;
      lastSlot.set(id, slot);
    }
    for (const [id, channel] of channels) {
      if (ending !== null && !ending.has(id)) continue;
      const slot = lastSlot.get(id);
      if (slot === undefined) {
        // An ending channel with no text in this event: its rest goes out just before it.
        const rest = released(id, channel);
        if (rest !== undefined) yield rest;
      } else if (channel.guard.holding) {
        const rest = channel.guard.end();
        check(channel.guard);
        if (rest.length > 0) slot.text += rest;
      }
    }
    yield event;
  }
  // The upstream ended without a text-less event after the text: release what is held.
  for (const [id, channel] of channels) {
    const rest = released(id, channel);
    if (rest !== undefined) yield rest;
  }
}
