/**
 * KEY=VALUE files such as the dev stack's `.zenova/dev.env`: one assignment a line, blank lines and
 * `#` comments skipped, an optional `export ` prefix, optional matching quotes around the value.
 * Problems name the file and line, never the value (it may be a token).
 */
import { statSync } from 'node:fs';
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

/** The variable whose value makes an env file a secret: the admin token. */
const SECRET_VARIABLE = 'ZENOVA_ADMIN_TOKEN';

/**
 * The warning for an env file holding the admin token that group or others may read (as for a
 * token file: docs/install.md has it readable by root only), or undefined. Names the file, its mode
 * and the fix, never the token.
 */
export function envFileNotPrivateWarning(file: string, values: Readonly<Record<string, string>>): string | undefined {
  if (values[SECRET_VARIABLE] === undefined || values[SECRET_VARIABLE].trim() === '') return undefined;
  let mode: number;
  try {
    mode = statSync(file).mode & 0o777;
  } catch {
    return undefined; // Read a moment ago; gone since: nothing to say about its mode.
  }
  if ((mode & 0o077) === 0) return undefined;
  const access = (mode & 0o044) !== 0 ? 'readable' : 'writable';
  return `zenova: warning: the env file ${file} holds ${SECRET_VARIABLE} and is ${access} by group or others (mode 0${mode.toString(8)}); keep it private (chmod 600 ${file})\n`;
}

/**
 * `option` (e.g. `--env-file`) names where the file came from when it is not one to read. `warn`
 * gets the warning for a file that holds the admin token and that group or others may read
 * (envFileNotPrivateWarning); standard error by default.
 */
export function readEnvFile(file: string, option = 'env file', warn: (line: string) => unknown = (line) => process.stderr.write(line)): Record<string, string> {
  let text: string;
  try {
    text = readRegularFile(file, MAX_ENV_FILE_BYTES);
  } catch (err) {
    if (!(err instanceof LocalFileError)) throw err;
    if (err.kind === 'unreadable') throw new EnvFileError(`cannot read env file ${file}: ${err.message}`);
    throw new EnvFileError(`${option} ${file} ${err.message}; is it really an env file?`);
  }
  const values = parseEnvFile(text, file);
  const warning = envFileNotPrivateWarning(file, values);
  if (warning !== undefined) warn(warning);
  return values;
}
