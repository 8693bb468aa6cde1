// Advice across the product sends the operator to a button of the node detail page by its name
// (`node detail › Issue upgrade command`: installer diagnostics, control-plane and node errors, the
// docs). Every name so written is a button the page has, written as the page writes it.
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
// @ts-expect-error: plain JavaScript module of the console, no types
import { COMMANDS } from '../../control-plane/src/console/ui/pages/node-detail.js';
import { REPO_ROOT } from '../fixtures/processes.js';

const buttons = new Set((COMMANDS as Array<{ button: string }>).map((c) => c.button));

function filesUnder(dir: string, ext: RegExp): string[] {
  return readdirSync(path.join(REPO_ROOT, dir), { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && ext.test(e.name))
    .map((e) => path.join(e.parentPath, e.name));
}

t.test('every "node detail › …" the product or its docs name is a button of the node detail page', async (t) => {
  const files = [...['installer/src', 'control-plane/src', 'edge-node/src'].flatMap((d) => filesUnder(d, /\.(ts|js)$/)), ...filesUnder('docs', /\.md$/)];
  const named: Array<{ file: string; name: string }> = [];
  for (const file of files) {
    for (const m of readFileSync(file, 'utf8').matchAll(/node detail › ([A-Z][a-z]+(?: [a-z]+)* command)/g)) named.push({ file: path.relative(REPO_ROOT, file), name: m[1]! });
  }
  t.ok(named.length >= 5, `advice names node detail buttons (${named.length} places), or this test proves nothing`);
  for (const { file, name } of named) t.ok(buttons.has(name), `${file}: "${name}" is one of the page's buttons (${[...buttons].join(', ')})`);
  t.same(new Set(named.map((n) => n.name)), buttons, 'and each of the three command buttons is one advice points at');
});
