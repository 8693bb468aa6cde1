// Where the codegen scripts find things by default: resolved from this file, not from the cwd,
// so `npm run gen:proto` and a test running from anywhere agree.
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const DEFAULT_PROTO_ROOT = join(REPO_ROOT, 'proto');
/** The committed output folder of a proto root (buf.gen.yaml's plugin `out`). */
export const GEN_DIR_NAME = 'gen';
export const BIN_DIR = join(REPO_ROOT, 'node_modules', '.bin');
export const BUF_BIN = join(BIN_DIR, 'buf');
