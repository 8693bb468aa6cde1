/**
 * The text of an OpenAI chat answer's `annotations` (a JSON message's, a stream delta's), for
 * output guardrails: every string value in each annotation, at any depth (a `url_citation`'s
 * `title` and `url`; other types' too, since their shapes differ between servers), but type tags
 * and ids (ANNOTATION_OPAQUE_KEYS). Like an Anthropic citation's, these are texts the model did not
 * write (TextSlot.notGenerated): checked, masked or blocking like the rest, but not kept as the
 * response text nor estimated as output. Past MAX_DEPTH levels the list is marked partial.
 */
import type { TextSlot } from '../../pipeline/context.js';
import { MAX_DEPTH } from '../json-string-slots.js';
import { markPartial } from '../partial-texts.js';
import type { DirtyMark } from '../text-slot.js';
import { FieldSlot } from '../text-slot.js';

/** Keys whose string values in an annotation are not text: type tags and ids. */
const ANNOTATION_OPAQUE_KEYS: ReadonlySet<string> = new Set(['type', 'id', 'file_id', 'container_id']);

/**
 * One string of an annotation: not the model's words. In a stream each is a part of its own on a
 * channel no running text uses, checked whole in its event (chat-stream.ts).
 */
export class AnnotationSlot extends FieldSlot {
  readonly notGenerated = true;

  constructor(
    holder: Record<string, unknown>,
    field: string,
    owner?: DirtyMark,
    channel?: number,
    readonly part?: number,
  ) {
    super(holder, field, owner, channel);
  }
}

/** Makes the slot for `holder[key]`, a string of an annotation. */
export type AnnotationSlotMaker = (holder: Record<string, unknown>, key: string) => TextSlot;

/**
 * Slots (made by `make`) for the strings in `holder.annotations` (a message's or a delta's), added
 * to `into`: an array of annotations, or one annotation object (or another object) in its place,
 * or a string there, all read the same way; before, anything but an array was passed on unread.
 */
export function annotationSlots(holder: Record<string, unknown>, into: TextSlot[], make: AnnotationSlotMaker): void {
  const annotations = holder.annotations;
  if (typeof annotations === 'string') into.push(make(holder, 'annotations'));
  else if (typeof annotations === 'object' && annotations !== null) walk(annotations as Record<string, unknown>, into, make, 1);
}

function walk(holder: Record<string, unknown> | unknown[], into: TextSlot[], make: AnnotationSlotMaker, depth: number): void {
  if (depth > MAX_DEPTH) {
    markPartial(into);
    return;
  }
  const record = holder as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    if (ANNOTATION_OPAQUE_KEYS.has(key)) continue;
    const value = record[key];
    if (typeof value === 'string') into.push(make(record, key));
    else if (typeof value === 'object' && value !== null) walk(value as Record<string, unknown>, into, make, depth + 1);
  }
}
