/**
 * Output rules over a streamed answer, keeping the provider's framing: the guard wraps the reply's
 * events and rewrites each text delta with what its TextGuard can release (held text goes out in
 * later deltas). Text still held when a text-less event arrives (the end of a content block, the
 * finish chunk, the terminal event) is released first, in a new delta shaped like the last text
 * event (`reply.textEvent`), so it lands before the block closes. Anthropic `ping`s are keep-alives
 * inside a block and do not end the text.
 *
 * On a block the stream throws ZN_ERR_GUARDRAIL_BLOCKED: the runner stops pulling (the upstream
 * call is aborted), ends the caller's stream with `reply.errorEvent` in the API's own framing, and
 * records the code; the blocked text itself is never released.
 */
import { zenovaError } from '../errors.js';
import type { PipelineContext, StreamEvent, UpstreamReply } from '../pipeline/context.js';
import type { CompiledPolicy } from './compiled-policy.js';
import { blockedMessage } from './policy-engine.js';
import { TextGuard, VerdictTally } from './text-guard.js';

type StreamReply = Extract<UpstreamReply, { kind: 'stream' }>;

/** Wraps `reply.events` with the policy's output rules (the caller checked the side has rules and is not broken). */
export function guardStream(ctx: PipelineContext, policy: CompiledPolicy, reply: StreamReply): void {
  const guard = new TextGuard(policy.output, new VerdictTally(policy.id, 'output', ctx.guardrails));
  reply.events = guardedEvents(reply.events, reply, guard, policy);
}

async function* guardedEvents(events: AsyncIterable<StreamEvent>, reply: StreamReply, guard: TextGuard, policy: CompiledPolicy): AsyncGenerator<StreamEvent> {
  let lastText: StreamEvent | undefined;
  const blocked = (): Error => zenovaError('ZN_ERR_GUARDRAIL_BLOCKED', blockedMessage(policy, guard.blockedBy!, 'output'));
  for await (const event of events) {
    if (event.texts.length > 0) {
      for (const slot of event.texts) {
        const text = slot.text;
        const out = guard.push(text);
        if (guard.blockedBy !== null) throw blocked();
        if (out !== text) slot.text = out;
      }
      if (event.terminal === true) {
        // Nothing may follow the terminal event: what is held goes out in it.
        const rest = guard.end();
        if (guard.blockedBy !== null) throw blocked();
        const last = event.texts[event.texts.length - 1]!;
        if (rest.length > 0) last.text += rest;
      }
      lastText = event;
      yield event;
      continue;
    }
    if (guard.holding && event.sse.event !== 'ping') {
      const rest = guard.end();
      if (guard.blockedBy !== null) throw blocked();
      if (rest.length > 0 && lastText !== undefined) yield reply.textEvent(rest, lastText);
    }
    yield event;
  }
  // The upstream ended without a text-less event after the text: release what is held.
  const rest = guard.end();
  if (guard.blockedBy !== null) throw blocked();
  if (rest.length > 0 && lastText !== undefined) yield reply.textEvent(rest, lastText);
}
