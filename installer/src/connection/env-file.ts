/**
 * KEY=VALUE files such as the dev stack's `.zenova/dev.env`: one assignment a line, blank lines and
 * `#` comments skipped, an optional `export ` prefix, optional matching quotes around the value.
 * Problems name the file and line, never the value (it may be a token).
 */
import { LocalFileError, readRegularFile } from '../local-files.js';

const MAX_ENV_FILE_BYTES = 64 * 1024;
const ASSIGNMENT = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/;

export class EnvFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EnvFileError';
  }
}

export function parseEnvFile(text: string, file: string): Record<string, string> {
  const out: Record<string, string> = {};
  const lines = text.split(/\r?\n/);
  for (const [index, raw] of lines.entries()) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const match = ASSIGNMENT.exec(line);
    const key = match?.[1];
    if (key === undefined) throw new EnvFileError(`${file}:${index + 1}: expected KEY=VALUE`);
    out[key] = unquote(match?.[2] ?? '');
  }
  return out;
}

function unquote(value: string): string {
  const first = value[0];
  if (value.length >= 2 && (first === '"' || first === "'") && value.endsWith(first)) return value.slice(1, -1);
  return value;
}

/** `option` (e.g. `--env-file`) names where the file came from when it is not one to read. */
export function readEnvFile(file: string, option = 'env file'): Record<string, string> {
  let text: string;
  try {
    text = readRegularFile(file, MAX_ENV_FILE_BYTES);
  } catch (err) {
    if (!(err instanceof LocalFileError)) throw err;
    if (err.kind === 'unreadable') throw new EnvFileError(`cannot read env file ${file}: ${err.message}`);
    throw new EnvFileError(`${option} ${file} ${err.message}; is it really an env file?`);
  }
  return parseEnvFile(text, file);
}
