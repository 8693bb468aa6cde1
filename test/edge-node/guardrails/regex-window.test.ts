// A policy regex scans long texts in bounded windows: a pattern quadratic on a run it fails on
// (`.*x`, `\w+@`) costs linear time times the window instead of hours, and matches up to 256
// characters are found exactly as a scan of the whole text finds them, across window edges.
import t from 'tap';
import { compileRegex } from '../../../edge-node/src/guardrails/detectors/regex.js';
import type { Match } from '../../../edge-node/src/guardrails/detectors/detector.js';

function detector(pattern: string): (text: string, from?: number) => Match[] {
  const compiled = compileRegex(pattern);
  if (!compiled.ok) throw new Error(compiled.reason);
  return compiled.detector.find;
}

function wholeScan(pattern: string, flags: string, text: string, from: number): Match[] {
  const re = new RegExp(pattern, flags);
  const out: Match[] = [];
  re.lastIndex = from;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    if (m[0].length === 0) re.lastIndex = m.index + 1;
    else out.push({ start: m.index, end: m.index + m[0].length });
  }
  return out;
}

t.test('a pattern quadratic on a failing run scans 200 000 characters in bounded time', async (t) => {
  // A whole-text scan does ~2*10^10 steps here (minutes); windows make it ~10^8.
  for (const pattern of ['.*x', '\\w+@']) {
    const find = detector(pattern);
    find('a'.repeat(3000));
    const started = performance.now();
    t.same(find('a'.repeat(200_000)), [], `${pattern} finds nothing`);
    const ms = performance.now() - started;
    t.ok(ms < 7_500, `${pattern}: ${Math.round(ms)} ms (about 150 ms expected)`);
  }
});

t.test('windowed scans find the same matches as a whole-text scan, across window edges', async (t) => {
  const words = ['a', 'b', 'c', ' ', '1', '-', 'x', 'y', 'z', 'q', 'foo', 'secret', 'HeLLo', '123-4567', 'order-2024'];
  let seed = 7;
  const random = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  for (const [pattern, flags] of [['\\d{3}-\\d{4}', 'gu'], ['secret\\w*', 'gu'], ['\\bfoo\\b', 'gu'], ['(?<!a)bc', 'gu'], ['x+y', 'gu'], ['[a-c]{2,40}', 'gu'], ['a.{0,200}z', 'gu'], ['q$', 'gu'], ['^a', 'gu'], ['(?i)hello', 'giu']] as const) {
    const find = detector(pattern);
    const source = pattern.replace('(?i)', '');
    let mismatches = 0;
    for (let k = 0; k < 40; k++) {
      let text = '';
      const length = 1000 + random(6000);
      while (text.length < length) text += words[random(words.length)];
      const from = random(10);
      if (JSON.stringify(find(text, from)) !== JSON.stringify(wholeScan(source, flags, text, from))) mismatches++;
    }
    t.equal(mismatches, 0, pattern);
  }
});
