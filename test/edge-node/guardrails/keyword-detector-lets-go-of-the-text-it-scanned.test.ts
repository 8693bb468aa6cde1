// A keywords detector lives in the compiled-policy cache for the life of the process. It remembers
// the text it last scanned only for the stream guard's `partial` call in the same turn: a whole
// prompt or answer it scanned must not stay in memory (nor in a heap dump) after the request.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import v8 from 'node:v8';
import vm from 'node:vm';
import t from 'tap';
import { keywordsDetector } from '../../../edge-node/src/guardrails/detectors/keywords.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

/** Scans a text holding a fresh marker and returns the marker reversed (so this test holds no copy of it). */
function scanOnce(detector: ReturnType<typeof keywordsDetector>): string {
  const marker = `caller-${randomUUID()}-prompt`;
  const found = detector.find(`please keep ${marker} private, it mentions VPN once`, 0);
  if (found.length !== 1) throw new Error(`expected one match, got ${found.length}`);
  return [...marker].reverse().join('');
}

t.test('a scanned text is not held by the detector once the turn that scanned it is over', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'zn-keyword-heap-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const detector = keywordsDetector(['vpn']);
  const reversed = scanOnce(detector);
  await nextTurn();
  gc();
  const file = v8.writeHeapSnapshot(join(dir, 'after.heapsnapshot'));
  const snapshot = readFileSync(file, 'utf8');
  const marker = [...reversed].reverse().join('');
  t.notOk(snapshot.includes(marker), 'the caller\'s text is gone from the heap');
  t.ok(detector.find('a vpn here', 0).length === 1, 'the detector still works');
});
