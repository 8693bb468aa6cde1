/**
 * The import boundary around the host CLI: installer/ may use edge-node/ and proto/ (it wraps the
 * node's enrollment and status code) but never control-plane/, and edge-node/ never imports the
 * installer.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { findCrossImports } from '../../packaging/build-checks/cross-imports.js';

t.test('installer → control-plane and edge-node → installer are caught; installer → edge-node is fine', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'zn-xi-inst-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const files: Record<string, string> = {
    'installer/src/a.ts': "import { enroll } from '../../edge-node/src/enroll/enroll.js';\nimport { P } from '../../proto/src/index.js';\n",
    'installer/src/b.ts': "\nimport { rule } from '../../control-plane/src/nodes/node-validation.js';\n",
    'edge-node/src/c.ts': "export { x } from '../../installer/src/a.js';\n",
    'control-plane/src/d.ts': "import { y } from '../../installer/src/a.js';\n",
  };
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  const found = findCrossImports(root).map((f) => `${f.file}:${f.line}->${f.reaches}`).sort();
  t.same(found, ['edge-node/src/c.ts:1->installer', 'installer/src/b.ts:2->control-plane']);
});
