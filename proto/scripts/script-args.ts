// Command-line parsing shared by the codegen scripts.
import { parseArgs } from 'node:util';
import { CodegenError } from './buf-codegen.js';

/** parseArgs that turns a usage mistake into a CodegenError (exit 2), never a stack trace. */
export function parseScriptArgs<K extends string>(names: readonly K[]): Partial<Record<K, string>> {
  const options = Object.fromEntries(names.map((name) => [name, { type: 'string' as const }]));
  try {
    return parseArgs({ options, strict: true, allowPositionals: false }).values as Partial<Record<K, string>>;
  } catch (err) {
    throw new CodegenError(`${(err as Error).message} (options: ${names.map((n) => `--${n} DIR`).join(' ')})`);
  }
}
