/**
 * Reads (UTF-8) a file an operator names (an option, a setting, a config path) only when it is a
 * regular file of at most `maxBytes`: a device such as /dev/zero has size 0 and was read until
 * memory ran out, and a FIFO with no writer blocked the program for ever. The installer, the node
 * and the control plane each word a refusal their own way, so it is returned as an outcome, not a
 * message. A symbolic link is followed, as a path an operator typed is.
 */
import { closeSync, constants, fstatSync, openSync, readSync, statSync } from 'node:fs';
import type { Stats } from 'node:fs';

/** What a path that is not a regular file is. */
export type NonRegularFileType = 'directory' | 'character-device' | 'block-device' | 'fifo' | 'socket' | 'other';

interface Refused {
  ok: false;
  file: string;
  maxBytes: number;
}

/**
 * Why nothing was read. `missing`: nothing at the path (ENOENT); `unreadable`: stat, open or read
 * failed otherwise. For both, `code` is the errno code (the message when there is none) and `error`
 * what fs threw.
 */
export type BoundedFileRefusal =
  | (Refused & { reason: 'missing' | 'unreadable'; code: string; error: Error })
  | (Refused & { reason: 'not-regular'; fileType: NonRegularFileType })
  | (Refused & { reason: 'too-large' });

export type BoundedFileRead = { ok: true; text: string } | BoundedFileRefusal;

function fileTypeOf(info: Stats): NonRegularFileType {
  if (info.isDirectory()) return 'directory';
  if (info.isCharacterDevice()) return 'character-device';
  if (info.isBlockDevice()) return 'block-device';
  if (info.isFIFO()) return 'fifo';
  if (info.isSocket()) return 'socket';
  return 'other';
}

function failed(file: string, maxBytes: number, thrown: unknown): BoundedFileRefusal {
  const error = thrown instanceof Error ? thrown : new Error(String(thrown));
  const code = (error as NodeJS.ErrnoException).code ?? error.message;
  return { ok: false, reason: code === 'ENOENT' ? 'missing' : 'unreadable', file, maxBytes, code, error };
}

function readOpened(fd: number, file: string, maxBytes: number): BoundedFileRead {
  const info = fstatSync(fd);
  if (!info.isFile()) return { ok: false, reason: 'not-regular', file, maxBytes, fileType: fileTypeOf(info) };
  if (info.size > maxBytes) return { ok: false, reason: 'too-large', file, maxBytes };
  // One byte past the limit: a file that grew since the fstat is refused, not read on and on.
  const buffer = Buffer.alloc(maxBytes + 1);
  let length = 0;
  while (length < buffer.length) {
    const read = readSync(fd, buffer, length, buffer.length - length, null);
    if (read === 0) break;
    length += read;
  }
  if (length > maxBytes) return { ok: false, reason: 'too-large', file, maxBytes };
  return { ok: true, text: buffer.subarray(0, length).toString('utf8') };
}

/** Synchronous: each caller reads such a file once, at start or for one command. */
export function readRegularFileWithin(file: string, maxBytes: number): BoundedFileRead {
  let fd: number;
  try {
    // Looked at before it is opened: opening some devices does something by itself.
    const info = statSync(file);
    if (!info.isFile()) return { ok: false, reason: 'not-regular', file, maxBytes, fileType: fileTypeOf(info) };
    // O_NONBLOCK: were it swapped for a FIFO meanwhile, the open returns at once and fstat refuses it.
    fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  } catch (err) {
    return failed(file, maxBytes, err);
  }
  let outcome: BoundedFileRead;
  try {
    outcome = readOpened(fd, file, maxBytes);
  } catch (err) {
    outcome = failed(file, maxBytes, err);
  }
  try {
    closeSync(fd);
  } catch (err) {
    // Text read from a file whose close failed is not trusted to be whole.
    if (outcome.ok) outcome = failed(file, maxBytes, err);
  }
  return outcome;
}
