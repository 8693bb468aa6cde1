// Local files the CLI reads or writes for the operator: a PEM to send, a CA to save (atomically).
import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
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
