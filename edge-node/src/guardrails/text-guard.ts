/**
 * Applies one direction of a compiled policy to text: whole texts (JSON bodies) or a stream of
 * deltas. For a stream it releases text only where no match can still change: it holds back the
 * policy's window (the longest text a detector needs to recognise a match) and any match that
 * touches the end of what has arrived (it may still grow), and never cuts through a match. So a
 * match split across deltas at any point is found and masked as one.
 */
import type { GuardrailVerdict } from '../../../proto/src/index.js';
import type { TextSlot } from '../pipeline/context.js';
import type { CompiledRule, Direction, PolicySide } from './compiled-policy.js';
import { mergeMatches } from './detectors/detector.js';
import type { Match } from './detectors/detector.js';

/** Unreleased stream text beyond this is released anyway (memory bound against a never-ending match). */
export const MAX_HELD_CHARS = 64 * 1024;
/**
 * At the hold cap, what is held from no further back than this before the end stays held (a match
 * or an undecided value near the end, the window); what is held from further back (a PEM block, a
 * long key) is cut through, masked. So a release at the cap frees at least half the cap.
 */
const HELD_PAST_CAP = MAX_HELD_CHARS / 2;
/** A stream is scanned again only once this much (or a quarter of the window) could be released. */
const MIN_RELEASE_CHARS = 32;
/** Released text kept as left context (what precedes a match, e.g. a digit that makes a longer run). */
const CONTEXT_CHARS = 64;
/** How much of a match cut through by the cap is kept to recognise its rest (a PEM header and more). */
const OPEN_HEAD_CHARS = 256;

/** One verdict per rule that matched, counted across every text of the request and direction. */
export class VerdictTally {
  private readonly byRule = new Map<number, GuardrailVerdict>();

  constructor(
    private readonly policyId: string,
    private readonly on: Direction,
    private readonly sink: GuardrailVerdict[],
  ) {}

  count(rule: CompiledRule, matches: number): void {
    if (matches === 0) return;
    const verdict = this.byRule.get(rule.index);
    if (verdict !== undefined) {
      verdict.matches += matches;
      return;
    }
    const created: GuardrailVerdict = { policyId: this.policyId, rule: rule.index, detector: rule.detector.name, action: rule.action, on: this.on, matches };
    this.byRule.set(rule.index, created);
    this.sink.push(created);
  }
}

interface RuleMatch extends Match {
  rule: CompiledRule;
}

export class TextGuard {
  private pending = '';
  private context = '';
  /** Held length at which push scans again (0: as soon as a release step is possible). */
  private scanAt = 0;
  /** The context is the head of a match the hold cap cut through (see release). */
  private open = false;
  /**
   * Per rule, where the last match it found ends, in the context (when it ends inside it): the
   * detector's scan of the whole text went on from there, so its next scan reads nothing new in
   * that match (Detector.find's `matchedTo`).
   */
  private readonly matchedTo = new Map<CompiledRule, number>();
  /** The block rule that matched; once set, nothing more is released. */
  blockedBy: CompiledRule | null = null;

  constructor(
    private readonly side: PolicySide,
    private readonly tally: VerdictTally,
  ) {}

  /**
   * All of `text`, as one finished text (a JSON body's field), masked. Matches of block rules are
   * masked too (and set `blockedBy`): the request is refused, but its body may still be recorded,
   * and the blocked text must not be. `jsonKey`: the text is a string value of a JSON object under
   * that key, or a string item of an array there (TextSlot.jsonKey).
   */
  whole(text: string, jsonKey?: string): string {
    this.pending = text;
    this.context = '';
    this.scanAt = 0;
    this.open = false;
    this.matchedTo.clear();
    return this.release(true, false, jsonKey);
  }

  /**
   * Each slot as one finished text (`whole`). Every slot is processed even after a block: the
   * verdicts are complete, and the blocked text is masked in the body too.
   */
  wholeTexts(slots: readonly TextSlot[]): void {
    for (const slot of slots) {
      const text = slot.text;
      if (text.length === 0) continue;
      const out = this.whole(text, slot.jsonKey);
      // Only a changed text is written back: writing makes a provider re-serialise its body.
      if (out !== text) slot.text = out;
    }
  }

  /** The next delta of a stream: returns what can be released now (possibly ''). */
  push(delta: string): string {
    if (this.blockedBy !== null) return '';
    this.pending += delta;
    // Scanning is what costs: wait until a useful amount past the window can be released.
    const window = this.side.window;
    if (this.pending.length < Math.max(this.scanAt, window + Math.max(MIN_RELEASE_CHARS, window >> 2))) return '';
    const text = this.release(this.pending.length > MAX_HELD_CHARS, true);
    // A match still open at the end (a long key, a PEM block) is held whole: scan again only once
    // the held text has doubled (or reached the cap), so holding it costs linear time, not quadratic.
    this.scanAt = this.pending.length > 2 * window ? Math.min(2 * this.pending.length, MAX_HELD_CHARS + 1) : 0;
    // A stream stops at a block: nothing of this release goes out.
    return this.blockedBy === null ? text : '';
  }

  /** The text so far has ended (end of stream or of a content block): releases all of it. */
  end(): string {
    if (this.blockedBy !== null || this.pending.length === 0) return '';
    this.scanAt = 0;
    const text = this.release(true);
    return this.blockedBy === null ? text : '';
  }

  get holding(): boolean {
    return this.pending.length > 0;
  }

  /**
   * `final`: release everything: the end of the text, or, when `streaming`, the hold cap, where the
   * cut is placed as in any scan (the window before the end, never inside a match nor an undecided
   * value) except through what is held from more than HELD_PAST_CAP before the end: that match (or
   * undecided value) is masked up to the cut, counted, and its head kept as the context. The
   * matches of a scan start at or after `from`, except while `open` is set: then the context is the
   * head of a match a cap cut through, and a match running on from it is that match's rest, masked
   * (unless flagged) without a new placeholder or a new count (a PEM block longer than the cap stays
   * masked to its END line).
   */
  private release(final: boolean, streaming = false, jsonKey?: string): string {
    const from = this.context.length;
    const scanned = this.context + this.pending;
    const length = scanned.length;
    const found: RuleMatch[] = [];
    const resuming = this.open;
    const capped = final && streaming;
    // At the cap, holds from before this are cut through (-1: none is).
    const cutThroughBefore = capped ? length - HELD_PAST_CAP : -1;
    for (const rule of this.side.rules) {
      let matches = rule.detector.find(scanned, resuming ? 0 : from, resuming ? 0 : (this.matchedTo.get(rule) ?? 0));
      // A whole JSON value (from 0): what its key makes a match, merged so one text counts once.
      const keyed = jsonKey === undefined ? undefined : rule.detector.findValueOf?.(jsonKey, scanned);
      if (keyed !== undefined && keyed.length > 0) matches = mergeMatches([matches, keyed]);
      for (const m of matches) {
        if (m.start >= from || m.end > from) found.push({ ...m, holdFrom: m.holdFrom ?? m.start, rule });
      }
    }
    // Where released text stops: the window before the end, and never inside a match nor between a
    // match and what makes it one (its holdFrom: moving back can put the cut inside another, hence
    // the loop). A match still growing at the end of what has arrived thus stays held whatever its
    // length, up to the cap. Cutting at the end of what arrived there let out the start of a value
    // still undecided (`Authorization: Bearer abc123` before `token…` came), and its rest alone was
    // no match (a JWT) or was masked without its start.
    let cut = final && !capped ? length : Math.max(from, length - this.side.window);
    // Undecided values the cap cuts through: masked as matches (they may become ones).
    const undecided: RuleMatch[] = [];
    if (cut < length) {
      for (const rule of this.side.rules) {
        // Resuming, the head in the context may be the start of one (a JWT the cap cut through).
        const partial = rule.detector.partial?.(scanned, resuming ? 0 : from) ?? null;
        if (partial === null) continue;
        const hold = Math.max(partial.holdFrom ?? partial.start, from);
        if (hold < cutThroughBefore) {
          // Part of a match the cap cuts through anyway (a PEM block's last line): masked with it.
          if (!found.some((m) => m.rule === rule && m.start <= partial.start && m.end >= length)) undecided.push({ ...partial, end: length, rule });
        } else if (hold < cut) cut = hold;
      }
    }
    // The cut only moves back, so each match is looked at once, latest end first (looking at all of
    // them for every move was quadratic: a chain of matches each held from inside the one before,
    // `Authorization: Bearer abc123token=` repeated, took seconds per 64 Ki characters held).
    const byEnd = found.slice().sort((a, b) => b.end - a.end);
    let next = 0;
    for (let moved = true; moved; ) {
      moved = false;
      for (; next < byEnd.length && byEnd[next]!.end > cut; next++) {
        const m = byEnd[next]!;
        // A match held from at or after the cut never moves it: the cut only goes back.
        const hold = Math.max(m.holdFrom ?? m.start, from);
        // At the cap, one held from too far back is cut through instead.
        if (hold < cut && hold >= cutThroughBefore) cut = hold;
      }
      // Never between the halves of a surrogate pair: each delta must be well-formed UTF-16
      // (strict JSON decoders refuse or replace a lone half).
      if (cut > from && cut < length && isHighSurrogate(scanned.charCodeAt(cut - 1))) {
        cut--;
        moved = true;
      }
    }
    // Still inside the rest of a cut-through match: nothing goes out, and its head stays the context.
    if (resuming && !final && cut === from) return '';
    const released = found.filter((m) => m.end <= cut);
    // What the cap cuts through: matches across the cut, and undecided values, masked up to it.
    const cutThrough = capped ? [...found.filter((m) => m.start < cut && m.end > cut), ...undecided.filter((m) => m.start < cut)] : [];
    const perRule = new Map<CompiledRule, number>();
    // The rest of a match the cap cut through was counted with its head.
    for (const m of [...released, ...cutThrough]) if (m.start >= from) perRule.set(m.rule, (perRule.get(m.rule) ?? 0) + 1);
    for (const rule of this.side.rules) this.tally.count(rule, perRule.get(rule) ?? 0);
    if (this.blockedBy === null) {
      for (const rule of this.side.rules) {
        if (rule.action === 'block' && perRule.has(rule)) {
          this.blockedBy = rule;
          break;
        }
      }
    }
    const text = masked(scanned, from, cut, [...released, ...cutThrough].filter((m) => m.rule.action !== 'flag'));
    // A match the cap cut through goes on past the cut: keep its head as the context, so its rest is
    // recognised (and masked) as the same match. A masked one's first; a flagged one's too, else its
    // rest, read alone, could count again (`token=` inside a long `password=token=…` value).
    const open = cutThrough.find((m) => m.rule.action !== 'flag') ?? cutThrough[0];
    this.open = open !== undefined;
    // The head of the part that runs past the cut (of a merged match, its last part: a PEM block
    // that a long value runs into, whose header lies past the value's head), from what makes it a
    // match (an assignment's name, before its value): the value's head alone would not be
    // recognised as a secret, and the rest of a long value went out in clear.
    const head = open?.tail !== undefined && open.tail.start < cut ? open.tail : open;
    const contextStart = head !== undefined ? (head.holdFrom ?? head.start) : Math.max(0, cut - CONTEXT_CHARS);
    this.context = scanned.slice(contextStart, head !== undefined ? Math.min(cut, head.start + OPEN_HEAD_CHARS) : cut);
    this.pending = scanned.slice(cut);
    this.keepMatchedTo(released, contextStart, head !== undefined);
    return text;
  }

  /** Moves each rule's `matchedTo` to the new context starting at `contextStart` of the scanned text. */
  private keepMatchedTo(released: readonly RuleMatch[], contextStart: number, open: boolean): void {
    const ends = new Map<CompiledRule, number>();
    // Resuming a cut-through match, the context is its head: its scan starts at 0.
    if (!open) {
      for (const [rule, end] of this.matchedTo) ends.set(rule, end);
      for (const m of released) if (m.end > (ends.get(m.rule) ?? 0)) ends.set(m.rule, m.end);
    }
    this.matchedTo.clear();
    for (const [rule, end] of ends) if (end > contextStart) this.matchedTo.set(rule, end - contextStart);
  }
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

/** scanned[from, to) with each mask match replaced by its placeholder; overlapping matches become one. */
function masked(scanned: string, from: number, to: number, masks: RuleMatch[]): string {
  if (masks.length === 0) return scanned.slice(from, to);
  masks.sort((a, b) => a.start - b.start || b.end - a.end);
  let out = '';
  let at = from;
  for (const m of masks) {
    if (m.end <= at) continue;
    if (m.start < at) {
      // Overlaps the previous mask: the placeholder already covers its start; swallow the rest.
      at = m.end;
      continue;
    }
    out += scanned.slice(at, m.start) + m.rule.detector.placeholder;
    at = m.end;
  }
  return out + scanned.slice(at, to);
}
