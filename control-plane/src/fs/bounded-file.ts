/**
 * Reads a file an operator names in a setting (a TLS certificate or key) only if it is a regular
 * file of bounded size: a device (`/dev/zero`) was read until memory ran out and a FIFO blocked the
 * start for ever, with nothing said. The reading is proto/src/bounded-regular-file.ts; the errors
 * are the control plane's own.
 */
import { readRegularFileWithin } from '../../../proto/src/bounded-regular-file.js';

/** The most a PEM file the control plane reads may hold (a certificate chain and its key). */
export const MAX_PEM_FILE_BYTES = 256 * 1024;

export function readBoundedRegularFile(file: string, maxBytes = MAX_PEM_FILE_BYTES): string {
  const read = readRegularFileWithin(file, maxBytes);
  if (read.ok) return read.text;
  switch (read.reason) {
    case 'missing':
    case 'unreadable':
      // What fs threw, as before: its message (e.g. "ENOENT: no such file or directory, stat …") is what callers quote.
      throw read.error;
    case 'not-regular':
      throw Object.assign(new Error(`${file} is not a regular file (a device, FIFO, socket or directory)`), { code: 'ENOTREGULAR' });
    case 'too-large':
      throw Object.assign(new Error(`${file} is larger than ${maxBytes / 1024} KiB`), { code: 'EFBIG' });
  }
}
