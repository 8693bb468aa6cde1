/**
 * docs/diagnostics.md and the installer's NODE-… table agree: every code is documented with its
 * blocking flag, and the doc lists no code the installer does not have.
 */
import t from 'tap';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { DIAGNOSTICS } from '../../installer/src/install/diagnostics.js';

const doc = readFileSync(new URL('../../docs/diagnostics.md', import.meta.url), 'utf8');
const rows = new Map<string, boolean>();
for (const line of doc.split('\n')) {
  const m = /^\|\s*`(NODE-[A-Z0-9-]+)`\s*\|\s*(yes|no)/.exec(line);
  if (m) rows.set(m[1]!, m[2] === 'yes');
}

t.test('every installer diagnostic code is in docs/diagnostics.md with its blocking flag', async (t) => {
  for (const [code, spec] of Object.entries(DIAGNOSTICS)) {
    t.equal(rows.get(code), spec.blocking, `${code} documented as ${spec.blocking ? 'blocking' : 'a warning'}`);
  }
});

t.test('docs/diagnostics.md lists no code the installer does not have', async (t) => {
  t.same([...rows.keys()].filter((c) => !(c in DIAGNOSTICS)), []);
});

t.test('every code the installer source names is in the table', async (t) => {
  const named = new Set<string>();
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const full = join(dir, e.name);
      if (e.isDirectory()) walk(full);
      else if (e.name.endsWith('.ts')) for (const m of readFileSync(full, 'utf8').matchAll(/'(NODE-[A-Z0-9-]+)'/g)) named.add(m[1]!);
    }
  };
  walk(new URL('../../installer/src', import.meta.url).pathname);
  t.same([...named].filter((c) => !(c in DIAGNOSTICS)), []);
});
