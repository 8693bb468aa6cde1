import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { findCrossImports } from '../../packaging/build-checks/cross-imports.js';

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const script = join(repoRoot, 'packaging/build-checks/cross-imports.ts');

function fakeRepo(t: { teardown(fn: () => void): void }, files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'zn-xi-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

t.test('the repository as it stands has no import between control-plane and edge-node', async (t) => {
  t.same(findCrossImports(repoRoot), []);
  const run = spawnSync(process.execPath, ['--import', 'tsx', script], { cwd: repoRoot, encoding: 'utf8' });
  t.equal(run.status, 0, run.stderr);
});

t.test('an edge-node file that imports control-plane code fails the check, naming file and line', async (t) => {
  const root = fakeRepo(t, {
    'control-plane/src/errors.ts': 'export const x = 1;\n',
    'edge-node/src/app.ts': "import type { A } from './a.js';\n\nimport { x } from '../../control-plane/src/errors.js';\n",
    'proto/src/index.ts': 'export const PROTOCOL_VERSION = 1;\n',
  });
  const found = findCrossImports(root);
  t.equal(found.length, 1);
  t.match(found[0], { file: 'edge-node/src/app.ts', line: 3, reaches: 'control-plane' });
  const run = spawnSync(process.execPath, ['--import', 'tsx', script, '--root', root], { encoding: 'utf8' });
  t.equal(run.status, 1);
  t.match(run.stderr, /edge-node\/src\/app\.ts:3 imports '\.\.\/\.\.\/control-plane\/src\/errors\.js'/);
});

t.test('dynamic import and re-export from the other side are caught too; proto imports are fine', async (t) => {
  const root = fakeRepo(t, {
    'control-plane/src/a.ts': "export * from '../../edge-node/src/b.js';\n",
    'control-plane/src/c.ts': "const m = await import('../../edge-node/src/d.js');\nimport { P } from '../../proto/src/index.js';\n",
    'edge-node/src/b.ts': "import { P } from '../../proto/src/index.js';\n",
  });
  const found = findCrossImports(root).map((f) => `${f.file}->${f.reaches}`).sort();
  t.same(found, ['control-plane/src/a.ts->edge-node', 'control-plane/src/c.ts->edge-node']);
});
