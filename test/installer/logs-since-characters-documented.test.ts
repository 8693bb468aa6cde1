/**
 * What `zenova logs --since` takes is said where operators read it: `zenova logs --help` names the
 * `@<seconds since the epoch>` form and a zone name, each an example the check lets through, and
 * docs/install.md lists the same characters the check allows (`@ / _` too: `@1700000000`,
 * `Asia/Shanghai`), no fewer.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { LOGS_USAGE, sinceProblem } from '../../installer/src/commands/logs.js';

/** The characters besides letters, digits and spaces that sinceProblem's refusal lists. */
function allowedPunctuation(): string[] {
  const refusal = sinceProblem('08:00 ; rm') ?? '';
  const listed = /may contain only letters, digits, spaces and (.*?) \(e\.g\./.exec(refusal)?.[1];
  if (listed === undefined) throw new Error(`no character list in ${JSON.stringify(refusal)}`);
  return listed.split(' ').sort();
}

t.test('zenova logs --help names the @epoch form and a zone name, both accepted', async (t) => {
  const since = /^ {2}--since T(?:.*\n)(?: {16}.*\n)*/m.exec(LOGS_USAGE)?.[0] ?? '';
  t.match(since, /@1700000000 \(seconds since the epoch\)/, 'the @epoch form');
  t.match(since, /Asia\/Shanghai/, 'a zone name');
  const examples = [...since.replace(/\([^)]*\)/g, '').replace(/^ {2}--since T +e\.g\./, '').matchAll(/'([^']+)'|([^\s,']+)/g)].map((m) => m[1] ?? m[2] ?? '');
  t.ok(examples.includes('@1700000000') && examples.includes('2026-11-29 08:00 Asia/Shanghai'), `examples: ${examples.join(' | ')}`);
  for (const value of examples) t.equal(sinceProblem(value), undefined, `${value} accepted`);
});

t.test('docs/install.md lists the characters --since allows, as the check allows them', async (t) => {
  const doc = readFileSync(new URL('../../docs/install.md', import.meta.url), 'utf8').replace(/\s+/g, ' ');
  const listed = /checked to be at most 64 characters of letters, digits, spaces and `([^`]+)`/.exec(doc)?.[1];
  t.ok(listed !== undefined, 'the doc has the character list');
  t.same(listed?.split(' ').sort(), allowedPunctuation(), `doc: ${listed}`);
  t.match(doc, /`@1700000000`/, 'the doc shows the @epoch form');
  for (const value of ['@1700000000', '2026-12-06 08:00 Asia/Shanghai', '2026-12-06 08:00 America/Argentina/Buenos_Aires']) t.equal(sinceProblem(value), undefined, `${value} accepted`);
});
