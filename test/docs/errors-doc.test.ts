/**
 * docs/errors.md and the two error tables say the same thing: every code in a table has a row in
 * its side's section with the same status and retryable flag, and the doc lists no code that
 * the code no longer has.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { errorTable as nodeErrors } from '../../edge-node/src/errors.js';
import { errorTable as controlPlaneErrors } from '../../control-plane/src/errors.js';

interface DocRow {
  status: number;
  retryable: boolean;
}

const doc = readFileSync(join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'docs', 'errors.md'), 'utf8');

/** Rows `| \`CODE\` | status | type | yes/no | … |` under the heading that starts with `heading`. */
function section(heading: string): Map<string, DocRow> {
  const start = doc.indexOf(`\n## ${heading}`);
  if (start < 0) throw new Error(`docs/errors.md has no "## ${heading}" section`);
  const end = doc.indexOf('\n## ', start + 4);
  const rows = new Map<string, DocRow>();
  for (const line of doc.slice(start, end < 0 ? undefined : end).split('\n')) {
    const m = /^\|\s*`(ZN_ERR_[A-Z0-9_]+)`\s*\|\s*(\d{3})\s*\|[^|]*\|\s*(yes|no)\s*\|/.exec(line);
    if (m) rows.set(m[1]!, { status: Number(m[2]), retryable: m[3] === 'yes' });
  }
  return rows;
}

const sides = [
  { name: 'node', heading: 'Node', table: nodeErrors as Record<string, { status: number; retryable: boolean }> },
  { name: 'control plane', heading: 'Control plane', table: controlPlaneErrors as Record<string, { status: number; retryable: boolean }> },
];

for (const side of sides) {
  t.test(`every ${side.name} error code is documented with its status and retryable flag`, async (t) => {
    const rows = section(side.heading);
    for (const [code, spec] of Object.entries(side.table)) {
      const row = rows.get(code);
      t.ok(row, `${code} is in docs/errors.md under "${side.heading}"`);
      if (row) t.same(row, { status: spec.status, retryable: spec.retryable }, `${code} matches the table`);
    }
  });
  t.test(`docs/errors.md lists no ${side.name} code that the code does not have`, async (t) => {
    const extra = [...section(side.heading).keys()].filter((c) => !(c in side.table));
    t.same(extra, []);
  });
}
