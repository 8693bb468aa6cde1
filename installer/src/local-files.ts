// Local files the CLI reads or writes for the operator: a PEM to send, a CA to save (atomically).
import { randomBytes } from 'node:crypto';
import { accessSync, closeSync, constants, fsyncSync, openSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import path from 'node:path';
import { readRegularFileWithin } from '../../proto/src/bounded-regular-file.js';
import type { BoundedFileRefusal, NonRegularFileType } from '../../proto/src/bounded-regular-file.js';
import { CommandFailure, UsageError } from './cli-context.js';

const MAX_PEM_BYTES = 256 * 1024;

/**
 * Why readRegularFile read nothing: `not-regular` (a device, FIFO or socket; the message says
 * which), `too-large`, or `unreadable` (the message is the errno code, EISDIR for a directory).
 */
export class LocalFileError extends Error {
  readonly kind: 'not-regular' | 'too-large' | 'unreadable';
  constructor(kind: LocalFileError['kind'], message: string) {
    super(message);
    this.name = 'LocalFileError';
    this.kind = kind;
  }
}

const NOT_REGULAR: Record<Exclude<NonRegularFileType, 'directory'>, string> = {
  'character-device': 'a character device',
  'block-device': 'a block device',
  fifo: 'a FIFO, a named pipe',
  socket: 'a socket',
  other: 'not a file',
};

function localFileError(refusal: BoundedFileRefusal): LocalFileError {
  switch (refusal.reason) {
    case 'missing':
    case 'unreadable':
      return new LocalFileError('unreadable', refusal.code);
    case 'not-regular':
      // A directory has always been reported as its errno, as reading one would fail.
      if (refusal.fileType === 'directory') return new LocalFileError('unreadable', 'EISDIR');
      return new LocalFileError('not-regular', `is not a regular file (it is ${NOT_REGULAR[refusal.fileType]})`);
    case 'too-large':
      return new LocalFileError('too-large', `is larger than ${refusal.maxBytes / 1024} KiB`);
  }
}

/**
 * Reads (UTF-8) a file an option or setting names, only when it is a regular file of at most
 * `maxBytes` (proto/src/bounded-regular-file.ts); a refusal is a LocalFileError.
 */
export function readRegularFile(file: string, maxBytes: number): string {
  const read = readRegularFileWithin(file, maxBytes);
  if (!read.ok) throw localFileError(read);
  return read.text;
}

/** Reads a PEM file named by an option; problems are usage errors naming the option and file. */
export function readPemOption(file: string, option: string, cwd: string, helpCommand: string): string {
  let text: string;
  try {
    text = readRegularFile(path.resolve(cwd, file), MAX_PEM_BYTES);
  } catch (err) {
    if (!(err instanceof LocalFileError)) throw err;
    if (err.kind === 'unreadable') throw new UsageError(`cannot read ${option} ${file}: ${err.message}`, helpCommand);
    throw new UsageError(`${option} ${file} ${err.message}; expected a PEM certificate`, helpCommand);
  }
  if (!text.includes('-----BEGIN CERTIFICATE-----')) throw new UsageError(`${option} ${file} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`, helpCommand);
  // A cert+key bundle: the key must not leave this host (the CA goes to the control plane and into install commands).
  if (/-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----/.test(text)) {
    throw new UsageError(`${option} ${file} holds a private key beside its certificate: nothing was sent; pass a file with the CA certificate only (e.g. openssl x509 -in ${file} -out ca.crt)`, helpCommand);
  }
  return text;
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
