// Runs buf with the local ts-proto plugin into a fresh staging folder. Everything is local
// (no remote plugins, no BSR deps), so generation works offline and gives the same bytes everywhere.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { BIN_DIR, BUF_BIN, GEN_DIR_NAME } from './paths.js';

export class CodegenError extends Error {
  override name = 'CodegenError';
}

export interface StagedCodegen {
  /** The generated tree (what proto/gen should contain). */
  genDir: string;
  /** Removes the staging folder. */
  cleanup: () => void;
}

/** Generates the TypeScript for `protoRoot` (a folder with buf.yaml and buf.gen.yaml) into a temp dir. */
export function generateToStaging(protoRoot: string): StagedCodegen {
  const root = resolve(protoRoot);
  for (const file of ['buf.yaml', 'buf.gen.yaml']) {
    if (!existsSync(join(root, file))) throw new CodegenError(`${join(root, file)} not found (is --proto-root a proto folder?)`);
  }
  const stage = mkdtempSync(join(tmpdir(), 'zenova-protogen-'));
  const cleanup = () => rmSync(stage, { recursive: true, force: true });
  // buf.gen.yaml names the plugin `protoc-gen-ts_proto`; buf looks it up on PATH, so put the repo's
  // own node_modules/.bin first rather than trusting whatever the machine has installed.
  const result = spawnSync(BUF_BIN, ['generate', root, '--template', join(root, 'buf.gen.yaml'), '--output', stage], {
    cwd: root,
    env: { ...process.env, PATH: `${BIN_DIR}${delimiter}${process.env.PATH ?? ''}` },
    encoding: 'utf8',
  });
  if (result.error !== undefined || result.status !== 0) {
    cleanup();
    const why = result.error?.message ?? `${result.stderr}${result.stdout}`.trim();
    throw new CodegenError(`buf generate failed (exit ${result.status ?? 'none'}): ${why}`);
  }
  const genDir = join(stage, GEN_DIR_NAME);
  if (!existsSync(genDir)) {
    cleanup();
    throw new CodegenError(`buf produced no ${GEN_DIR_NAME}/ folder: buf.gen.yaml's plugin out must be "${GEN_DIR_NAME}"`);
  }
  return { genDir, cleanup };
}
