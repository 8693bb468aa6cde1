// `npm run check:codegen [-- --proto-root DIR --gen-dir DIR]`: regenerates into a temp dir and
// compares byte-for-byte with the committed output. Exit 0 when equal, 1 when stale (listing the
// files), 2 when generation itself fails (e.g. a .proto syntax error).
import { join, resolve } from 'node:path';
import { CodegenError, generateToStaging, type StagedCodegen } from './buf-codegen.js';
import { parseScriptArgs } from './script-args.js';
import { DEFAULT_PROTO_ROOT, GEN_DIR_NAME } from './paths.js';
import { diffTrees, isEmptyDiff } from './tree-diff.js';

function main(): void {
  let genDir: string;
  let staged: StagedCodegen;
  try {
    const values = parseScriptArgs(['proto-root', 'gen-dir']);
    const protoRoot = resolve(values['proto-root'] ?? DEFAULT_PROTO_ROOT);
    genDir = resolve(values['gen-dir'] ?? join(protoRoot, GEN_DIR_NAME));
    staged = generateToStaging(protoRoot);
  } catch (err) {
    if (!(err instanceof CodegenError)) throw err;
    console.error(`check:codegen: ${err.message}`);
    process.exitCode = 2;
    return;
  }
  try {
    const diff = diffTrees(staged.genDir, genDir);
    if (isEmptyDiff(diff)) {
      console.log(`check:codegen: ${genDir} is up to date`);
      return;
    }
    const lines = [
      ...diff.changed.map((f) => `  changed: ${f}`),
      ...diff.missing.map((f) => `  missing: ${f}`),
      ...diff.extra.map((f) => `  extra:   ${f}`),
    ];
    console.error(`check:codegen: generated code in ${genDir} is stale:\n${lines.join('\n')}\nrun npm run gen:proto`);
    process.exitCode = 1;
  } finally {
    staged.cleanup();
  }
}

main();
