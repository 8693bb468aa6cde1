/**
 * Bundles the node daemon (edge-node/src/main.ts) and the host CLI (installer/src/cli.ts) into one
 * ESM file each with esbuild (present as tsx's dependency). better-sqlite3 stays external: it is a
 * native module shipped under app/node_modules, rebuilt for the carried runtime. CommonJS
 * dependencies bundled into ESM still call require() for Node builtins, so each bundle defines a
 * `require` from createRequire. esbuild's metafile names the node_modules packages inlined into
 * each bundle; their license texts go to THIRD-PARTY-NOTICES (third-party-notices.ts).
 */
import { build } from 'esbuild';
import path from 'node:path';
import { RUNTIME_NODE_MAJOR } from './node-runtime.js';
import { packageDirOf } from './third-party-notices.js';

export interface AppBundle {
  /** Path inside the release, e.g. app/edge-node/zenova-node.mjs. */
  path: string;
  contents: Buffer;
  /** Absolute dirs of the node_modules packages whose code is inlined, sorted. */
  packageDirs: string[];
}

const REQUIRE_SHIM = "import { createRequire as __zenovaCreateRequire } from 'node:module'; const require = __zenovaCreateRequire(import.meta.url);";

async function bundle(repoRoot: string, entry: string): Promise<Omit<AppBundle, 'path'>> {
  const result = await build({
    entryPoints: [path.join(repoRoot, entry)],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: `node${RUNTIME_NODE_MAJOR}`,
    external: ['better-sqlite3'],
    banner: { js: REQUIRE_SHIM },
    write: false,
    minify: false,
    // The license texts are collected whole into THIRD-PARTY-NOTICES instead of scattered comments.
    legalComments: 'none',
    metafile: true,
    logLevel: 'silent',
    absWorkingDir: repoRoot,
  });
  const out = result.outputFiles[0];
  if (out === undefined) throw new Error(`esbuild produced nothing for ${entry}`);
  const packageDirs = new Set<string>();
  for (const input of Object.keys(result.metafile.inputs)) {
    // Inputs are paths relative to absWorkingDir; a namespaced one (`<define:…>`) is no file.
    if (input.includes(':')) continue;
    const dir = packageDirOf(path.resolve(repoRoot, input));
    if (dir !== undefined) packageDirs.add(dir);
  }
  return { contents: Buffer.from(out.contents), packageDirs: [...packageDirs].sort() };
}

/**
 * The node daemon and the CLI. Paths matter: edge-node's productVersion() walks up to app/package.json,
 * and the CLI finds its trusted key at ../../release-signing-key.pub.pem from its own file (the
 * release or installer root), as installer/src/package/release-key.ts resolves it.
 */
export async function bundleApps(repoRoot: string): Promise<{ node: AppBundle; cli: AppBundle }> {
  const [node, cli] = await Promise.all([bundle(repoRoot, 'edge-node/src/main.ts'), bundle(repoRoot, 'installer/src/cli.ts')]);
  return { node: { path: 'app/edge-node/zenova-node.mjs', ...node }, cli: { path: 'app/installer/zenova.mjs', ...cli } };
}
