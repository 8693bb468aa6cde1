// The Requests page's durations (Total in the list, the record's timings and attempts): the API
// gives the node's measurement as it is (3.5142280000145547), the page shows it with at most one
// decimal. The console's modules are plain ES modules, imported here as the browser loads them.
import t from 'tap';
// @ts-expect-error: plain JavaScript module of the console, no types
import { formatMs as formatMsUntyped } from '../../control-plane/src/console/ui/pages/requests.js';

const formatMs = formatMsUntyped as (value: unknown) => string;

t.test('a fractional duration shows with one decimal, a whole one as it is', async (t) => {
  t.equal(formatMs(3.5142280000145547), '3.5 ms', 'the value the dev stack showed raw');
  t.equal(formatMs(0.04), '0 ms');
  t.equal(formatMs(12.96), '13 ms', 'rounded, no trailing .0');
  t.equal(formatMs(1850), '1850 ms');
  t.equal(formatMs(999.96), '1000 ms');
  t.equal(formatMs(61_234.5678), '61234.6 ms');
  t.equal(formatMs(0), '0 ms');
});

t.test('no duration is a dash, never "null ms"', async (t) => {
  t.equal(formatMs(null), '—');
  t.equal(formatMs(undefined), '—');
});
