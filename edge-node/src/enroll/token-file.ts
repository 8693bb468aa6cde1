/**
 * Reads a one-time token from a file (`--token-file` of `zenova-node enroll` and of the installer's
 * `zenova install node`), so both read the same file the same way, with the same messages.
 */
import { stat } from 'node:fs/promises';
import { readRegularFileWithin } from '../../../proto/src/bounded-regular-file.js';
import type { BoundedFileRefusal } from '../../../proto/src/bounded-regular-file.js';

export const MAX_TOKEN_FILE_BYTES = 4096;

/** A token file that cannot be used: the message names the file and what to do. */
export class TokenFileError extends Error {}

export interface TokenFile {
  token: string;
  /** The file's mode bits (0o777). */
  mode: number;
  /** Group or others have any access to the file (mode & 0o077): the token is not private. */
  notPrivate: boolean;
}

/** Why a token file was not read, in the words both commands use. */
function tokenFileRefusal(refusal: BoundedFileRefusal): TokenFileError {
  switch (refusal.reason) {
    case 'missing':
    case 'unreadable':
      return new TokenFileError(`cannot read --token-file ${refusal.file} (${refusal.code})`);
    case 'not-regular':
      return new TokenFileError(`--token-file ${refusal.file} is not a regular file`);
    case 'too-large':
      return new TokenFileError(`--token-file ${refusal.file} is larger than ${MAX_TOKEN_FILE_BYTES} bytes`);
  }
}

export async function readTokenFile(file: string): Promise<TokenFile> {
  // Read only if a regular file of at most MAX_TOKEN_FILE_BYTES (a device or FIFO refused unread).
  const read = readRegularFileWithin(file, MAX_TOKEN_FILE_BYTES);
  if (!read.ok) throw tokenFileRefusal(read);
  let mode: number;
  try {
    // Only for the warning about a token others may read.
    mode = (await stat(file)).mode & 0o777;
  } catch (err) {
    throw new TokenFileError(`cannot read --token-file ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  return { token: tokenIn(read.text, `--token-file ${file}`), mode, notPrivate: (mode & 0o077) !== 0 };
}

/** `--token-file -`: the token is read from standard input. */
export const STDIN_TOKEN_FILE = '-';

/**
 * `--token-file -`: the token from standard input, its one non-blank line, read to its end (at most
 * MAX_TOKEN_FILE_BYTES). Keeps the token out of the process list and off the disk:
 * `printf '%s\n' TOKEN | sudo ./zenova install node … --token-file -` (printf is the shell's own).
 */
export async function readTokenStdin(stdin: AsyncIterable<Buffer | string>): Promise<string> {
  const what = '--token-file - (standard input)';
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of stdin) {
    const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    bytes += buffer.length;
    if (bytes > MAX_TOKEN_FILE_BYTES) throw new TokenFileError(`${what} holds more than ${MAX_TOKEN_FILE_BYTES} bytes: pass only the token from the install command`);
    chunks.push(buffer);
  }
  return tokenIn(Buffer.concat(chunks).toString('utf8'), what);
}

/** The one non-blank line of a token file's text. */
function tokenIn(text: string, what: string): string {
  // The token is the one non-blank line: blank lines around it are an editor's, but a second
  // non-blank line means the file holds something else too, and guessing which line is the token
  // could redeem the wrong one.
  const lines = text.split(/\r?\n/).map((line) => line.trim()).filter((line) => line !== '');
  const token = lines[0] ?? '';
  if (token === '') throw new TokenFileError(`${what} is empty: write the token from the install command into it`);
  if (lines.length > 1) throw new TokenFileError(`${what} has ${lines.length} non-blank lines; a token file holds one token: write only the token from the install command into it`);
  return token;
}

/** The one-line cause of the warning about a token file others may read. */
export function tokenFileNotPrivate(file: string, mode: number): string {
  return `the token file ${file} is readable by group or others (mode 0${mode.toString(8)})`;
}

/** The enrollment's own limit on a token's length (enroll.ts). */
export const MAX_TOKEN_CHARS = 512;

/**
 * Why `token` (from `what`: `--token`, the token in a file) cannot be an enrollment token, in the
 * words both `zenova install node` and `zenova-node enroll` refuse it with (a bad command line,
 * exit 2), or undefined when its shape is fine.
 */
export function tokenShapeProblem(token: string, what: string): string | undefined {
  if (token === '') return `${what} is empty (an unset shell variable?): pass the token from the install command`;
  if (/\s/.test(token)) return `${what} contains whitespace; tokens never do: copy it again from the install command`;
  if (token.length > MAX_TOKEN_CHARS) return `${what} is longer than ${MAX_TOKEN_CHARS} characters: copy it again from the install command`;
  return undefined;
}
