// Local files the CLI reads or writes for the operator: a PEM to send, a CA to save (never over other content).
import { randomBytes } from 'node:crypto';
import { accessSync, closeSync, constants, fsyncSync, linkSync, openSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import path from 'node:path';
import { readRegularFileWithin } from '../../proto/src/bounded-regular-file.js';
import { holdsPrivateKeyPem, separatePemBlocks } from '../../edge-node/src/state/pem.js';
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
  if (holdsPrivateKeyPem(text)) {
    throw new UsageError(`${option} ${file} holds a private key beside its certificate: nothing was sent; pass a file with the CA certificate only (e.g. openssl x509 -in ${file} -out ca.crt)`, helpCommand);
  }
  // Certificates concatenated without a newline between them are put on lines of their own.
  return separatePemBlocks(text);
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

/**
 * Whether `text` is nothing but PEM certificates: `-----BEGIN CERTIFICATE-----` … `-----END
 * CERTIFICATE-----` blocks of base64 and blank lines (CRLF line ends too). An empty file passes.
 */
export function holdsOnlyPemCertificates(text: string): boolean {
  let inBlock = false;
  for (const raw of text.split('\n')) {
    const line = raw.trimEnd();
    if (inBlock) {
      if (line === '-----END CERTIFICATE-----') inBlock = false;
      else if (!/^[A-Za-z0-9+/=]+$/.test(line)) return false;
    } else if (line === '-----BEGIN CERTIFICATE-----') {
      inBlock = true;
    } else if (line !== '') {
      return false;
    }
  }
  return !inBlock;
}

/** The same certificates: line ends and blank lines around them do not count. */
function samePem(a: string, b: string): boolean {
  const normal = (text: string): string => text.replace(/\r\n/g, '\n').trim();
  return normal(a) === normal(b);
}

/**
 * Checks, before anything is created or issued, a file option a CA certificate is to be saved in
 * (`--ca-out`): writable as checkWritableFileOption, and, when something is there already, a
 * regular file holding only PEM certificates. Only such a file may be found to hold the very CA
 * once the API answers (then it is left as is); anything else would be lost, so it is refused now.
 */
export function checkCertificateOutOption(file: string | undefined, option: string, cwd: string, helpCommand: string): void {
  checkWritableFileOption(file, option, cwd, helpCommand);
  if (file === undefined) return;
  const advice = `nothing was sent; pass another ${option} path, or remove ${file} first`;
  let text: string;
  try {
    text = readRegularFile(path.resolve(cwd, file), MAX_PEM_BYTES);
  } catch (err) {
    if (!(err instanceof LocalFileError)) throw err;
    if (err.message === 'ENOENT') return; // Not there yet: it will be created.
    if (err.kind === 'unreadable') throw new UsageError(`${option} ${file} exists but cannot be read (${err.message}), so it cannot be told to hold the CA: ${advice}`, helpCommand);
    throw new UsageError(`${option} ${file} exists and ${err.message}, not a CA file to save over: ${advice}`, helpCommand);
  }
  if (!holdsOnlyPemCertificates(text)) {
    throw new UsageError(`${option} ${file} exists and holds something other than PEM certificates; it is not overwritten: ${advice}`, helpCommand);
  }
}

/**
 * What saveCertificateFile did: `written` (the file was not there, or was empty), `already-held`
 * (it held these certificates already, left as is), or `kept-other-content` (something else was
 * there: left as is, the certificate not saved).
 */
export interface CertificateFileSave {
  outcome: 'written' | 'already-held' | 'kept-other-content';
  /** The absolute path. */
  path: string;
}

/** An existing file's fate: undefined when nothing (or only whitespace) is there to keep. */
function existingOutcome(full: string, pem: string): CertificateFileSave['outcome'] | undefined {
  let text: string;
  try {
    text = readRegularFile(full, MAX_PEM_BYTES);
  } catch (err) {
    if (err instanceof LocalFileError && err.message === 'ENOENT') return undefined;
    // Not a regular file, too large or unreadable: it cannot be told to hold this CA, so it is kept.
    return 'kept-other-content';
  }
  if (text.trim() === '') return undefined;
  return samePem(text, pem) ? 'already-held' : 'kept-other-content';
}

function writeTempBeside(full: string, text: string, mode: number): string {
  const tmp = path.join(path.dirname(full), `.${path.basename(full)}.${randomBytes(6).toString('hex')}.tmp`);
  const fd = openSync(tmp, 'wx', mode);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  } finally {
    closeSync(fd);
  }
  return tmp;
}

/** Filesystems that cannot hard-link (FAT, some network mounts): a plain rename is used there. */
const NO_HARD_LINKS = new Set(['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS', 'EMLINK']);

/**
 * Saves a PEM certificate (a CA) to `file` (relative to cwd), never over another file's content:
 * a file already holding these certificates is left as is (a rerun with the same --ca-out), and a
 * file holding anything else is kept and reported, for the caller to show the CA instead. A new
 * file is written to a temp file and hard-linked into place, which fails rather than replace a
 * file that appeared meanwhile. Write failures are a CommandFailure.
 */
export function saveCertificateFile(file: string, pem: string, cwd: string, mode = 0o644): CertificateFileSave {
  const full = path.resolve(cwd, file);
  const before = existingOutcome(full, pem);
  if (before !== undefined) return { outcome: before, path: full };
  let tmp: string | undefined;
  try {
    tmp = writeTempBeside(full, pem, mode);
    try {
      linkSync(tmp, full);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? '';
      if (code === 'EEXIST') {
        // Created since it was looked at (or an empty file is there): judged as any file found there.
        const now = existingOutcome(full, pem);
        if (now !== undefined) return { outcome: now, path: full };
        renameSync(tmp, full);
      } else if (NO_HARD_LINKS.has(code)) {
        renameSync(tmp, full);
      } else {
        throw err;
      }
    }
  } catch (err) {
    throw new CommandFailure(`cannot write ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { cause: err });
  } finally {
    if (tmp !== undefined) rmSync(tmp, { force: true });
  }
  return { outcome: 'written', path: full };
}
