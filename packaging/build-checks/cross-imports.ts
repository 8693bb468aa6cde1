/**
 * Build check: control-plane/ and edge-node/ never import each other. They meet only in proto/,
 * so that a node can be built, shipped and upgraded without the control plane's code (and back).
 * The host CLI installer/ ships on node hosts beside the node: it may use edge-node (and proto) but
 * never control-plane, and edge-node never imports the installer.
 * eslint's no-restricted-imports says the same inside the editor; this check is what `npm run build`
 * runs, and it also catches dynamic import() and require() with a literal path.
 *
 * Usage: tsx packaging/build-checks/cross-imports.ts [--root DIR]
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

export interface CrossImport {
  file: string;
  line: number;
  specifier: string;
  reaches: string;
}

const SIDES = ['control-plane', 'edge-node', 'installer'] as const;
/** Which other sides each side must not reach. */
const FORBIDDEN: Record<(typeof SIDES)[number], ReadonlyArray<(typeof SIDES)[number]>> = {
  'control-plane': ['edge-node'],
  'edge-node': ['control-plane', 'installer'],
  installer: ['control-plane'],
};
const SOURCE_FILE = /\.(c|m)?(t|j)sx?$/;
// import … from 'x' · export … from 'x' · import 'x' · import('x') · require('x')
const SPECIFIER = /(?:\bfrom\s*|\bimport\s*\(\s*|\brequire\s*\(\s*|^\s*import\s+)(['"])([^'"\n]+)\1/gm;

function listSourceFiles(dir: string): string[] {
  let out: string[] = [];
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch {
    return out;
  }
  for (const name of entries) {
    if (name === 'node_modules' || name === 'dist' || name.startsWith('.')) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out = out.concat(listSourceFiles(path));
    else if (SOURCE_FILE.test(name)) out.push(path);
  }
  return out;
}

/** Which top-level side (if any) a path inside root belongs to. */
function sideOf(root: string, path: string): (typeof SIDES)[number] | undefined {
  const first = relative(root, path).split(sep)[0];
  return SIDES.find((s) => s === first);
}

export function findCrossImports(root: string): CrossImport[] {
  const found: CrossImport[] = [];
  for (const side of SIDES) {
    for (const file of listSourceFiles(join(root, side))) {
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(SPECIFIER)) {
        const specifier = m[2] ?? '';
        const line = text.slice(0, m.index).split('\n').length;
        let reaches: string | undefined;
        if (specifier.startsWith('.')) {
          const target = sideOf(root, resolve(dirname(file), specifier));
          if (target && FORBIDDEN[side].includes(target)) reaches = target;
        } else {
          // A bare or workspace specifier naming a forbidden side (e.g. 'edge-node/src/x.js').
          const other = FORBIDDEN[side].find((s) => specifier === s || specifier.startsWith(`${s}/`) || specifier.includes(`/${s}/`));
          if (other) reaches = other;
        }
        if (reaches) found.push({ file: relative(root, file), line, specifier, reaches });
      }
    }
  }
  return found;
}

function main(): void {
  const { values } = parseArgs({ options: { root: { type: 'string' } } });
  const root = resolve(values.root ?? join(dirname(fileURLToPath(import.meta.url)), '..', '..'));
  const found = findCrossImports(root);
  if (found.length === 0) {
    console.log('cross-imports: ok (control-plane and edge-node do not import each other; installer does not import control-plane)');
    return;
  }
  console.error('cross-imports: control-plane and edge-node must not import each other (share through proto/), nor installer control-plane:');
  for (const f of found) console.error(`  ${f.file}:${f.line} imports '${f.specifier}' (in ${f.reaches}/)`);
  process.exitCode = 1;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
