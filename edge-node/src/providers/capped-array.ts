/**
 * An array schema for caller arrays: its length bounded, its elements checked one by one up to the
 * first bad one. zod's own z.array checks every element and keeps one issue per failure (and a
 * union tries each option over the whole array), so a body of many small bad elements, well under
 * the size limit and sent without a key, held the event loop for seconds before its 400; callers
 * are told only the first problem anyway. The length is checked before any element (zod 4 checks
 * an array's size caps first; test/edge-node/request-array-bounds.test.ts holds it to that).
 */
import { z } from 'zod';

export function cappedArray<T extends z.ZodType>(element: T, bounds: { min?: number; max: number }): z.ZodType<Array<z.output<T>>, Array<z.input<T>>> {
  let array = z.array(z.unknown());
  if (bounds.min !== undefined) array = array.min(bounds.min);
  const checked = array.max(bounds.max).check((payload) => {
    // The copy z.array made; each element becomes its parsed value, as z.array(element) would.
    const items = payload.value;
    for (let i = 0; i < items.length; i++) {
      const result = element.safeParse(items[i]);
      if (!result.success) {
        // Their words and paths are what validateBody reports; zod's own issue codes are not needed.
        for (const issue of result.error.issues) payload.issues.push({ code: 'custom', message: issue.message, path: [i, ...issue.path], input: items[i] });
        return;
      }
      items[i] = result.data;
    }
  });
  // Its output is the elements' parsed values, which z.array(z.unknown()) cannot say.
  return checked as unknown as z.ZodType<Array<z.output<T>>, Array<z.input<T>>>;
}
