// Local files the CLI reads or writes for the operator: a PEM to send, a CA to save (atomically).
import { randomBytes } from 'node:crypto';
import { accessSync, closeSync, constants, fsyncSync, openSync, readFileSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import path from 'node:path';
import { CommandFailure, UsageError } from './cli-context.js';

const MAX_PEM_BYTES = 256 * 1024;

/** Reads a PEM file named by an option; problems are usage errors naming the option and file. */
export function readPemOption(file: string, option: string, cwd: string, helpCommand: string): string {
  const full = path.resolve(cwd, file);
  try {
    if (statSync(full).size > MAX_PEM_BYTES) throw new UsageError(`${option} ${file} is larger than 256 KiB; expected a PEM certificate`, helpCommand);
    const text = readFileSync(full, 'utf8');
    if (!text.includes('-----BEGIN CERTIFICATE-----')) throw new UsageError(`${option} ${file} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`, helpCommand);
    return text;
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(`cannot read ${option} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, helpCommand);
  }
}

/**
 * Checks, before anything is created or issued, that `file` (an option's value) can be written:
 * a bad --ca-out found after the API call left a node created (or a command reissued) and exit 1.
 */
export function checkWritableFileOption(file: string | undefined, option: string, cwd: string, helpCommand: string): void {
  if (file === undefined) return;
  if (file.trim() === '') throw new UsageError(`${option} is empty (an unset shell variable?): pass the file to write, or leave ${option} out`, helpCommand);
  const full = path.resolve(cwd, file);
  const dir = path.dirname(full);
  try {
    if (!statSync(dir).isDirectory()) throw new UsageError(`${option} ${file}: ${dir} is not a directory`, helpCommand);
    accessSync(dir, constants.W_OK);
  } catch (err) {
    if (err instanceof UsageError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    throw new UsageError(`${option} ${file}: ${code === 'ENOENT' ? `the directory ${dir} does not exist` : `cannot write in ${dir} (${code ?? (err as Error).message})`}`, helpCommand);
  }
  let isDirectory = false;
  try {
    isDirectory = statSync(full).isDirectory();
  } catch {
    // Not there yet: it will be created.
  }
  if (isDirectory) throw new UsageError(`${option} ${file} is a directory; name the file to write`, helpCommand);
}

/** Writes `text` to `file` (relative to cwd) by temp file + rename; returns the absolute path. */
export function writeTextFileAtomic(file: string, text: string, cwd: string, mode = 0o644): string {
  const full = path.resolve(cwd, file);
  const tmp = path.join(path.dirname(full), `.${path.basename(full)}.${randomBytes(6).toString('hex')}.tmp`);
  try {
    const fd = openSync(tmp, 'wx', mode);
    try {
      writeSync(fd, text);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, full);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw new CommandFailure(`cannot write ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { cause: err });
  }
  return full;
}
