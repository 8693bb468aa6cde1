/**
 * KEY=VALUE files such as the dev stack's `.zenova/dev.env`: one assignment a line, blank lines and
 * `#` comments skipped, an optional `export ` prefix, optional matching quotes around the value.
 * Problems name the file and line, never the value (it may be a token).
 */
import { readFileSync, statSync } from 'node:fs';

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

export function readEnvFile(file: string): Record<string, string> {
  let text: string;
  try {
    const size = statSync(file).size;
    if (size > MAX_ENV_FILE_BYTES) throw new EnvFileError(`${file} is larger than ${MAX_ENV_FILE_BYTES / 1024} KiB; is it really an env file?`);
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if (err instanceof EnvFileError) throw err;
    throw new EnvFileError(`cannot read env file ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  return parseEnvFile(text, file);
}
