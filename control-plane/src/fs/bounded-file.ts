/**
 * Reads a file an operator names in a setting (a TLS certificate or key) only if it is a regular
 * file of bounded size: a device (`/dev/zero`) was read until memory ran out and a FIFO blocked the
 * start for ever, with nothing said.
 */
import { closeSync, constants, fstatSync, openSync, readSync, statSync } from 'node:fs';

/** The most a PEM file the control plane reads may hold (a certificate chain and its key). */
export const MAX_PEM_FILE_BYTES = 256 * 1024;

export function readBoundedRegularFile(file: string, maxBytes = MAX_PEM_FILE_BYTES): string {
  const notRegular = (): Error => Object.assign(new Error(`${file} is not a regular file (a device, FIFO, socket or directory)`), { code: 'ENOTREGULAR' });
  // Looked at before it is opened: opening some devices does something by itself.
  if (!statSync(file).isFile()) throw notRegular();
  // O_NONBLOCK: were it swapped for a FIFO meanwhile, the open returns at once and fstat refuses it.
  const fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  try {
    const info = fstatSync(fd);
    if (!info.isFile()) throw notRegular();
    const tooLarge = (): Error => Object.assign(new Error(`${file} is larger than ${maxBytes / 1024} KiB`), { code: 'EFBIG' });
    if (info.size > maxBytes) throw tooLarge();
    // One byte past the limit: a file that grew since the fstat is refused, not read on and on.
    const buffer = Buffer.alloc(maxBytes + 1);
    let length = 0;
    while (length < buffer.length) {
      const read = readSync(fd, buffer, length, buffer.length - length, null);
      if (read === 0) break;
      length += read;
    }
    if (length > maxBytes) throw tooLarge();
    return buffer.subarray(0, length).toString('utf8');
  } finally {
    closeSync(fd);
  }
}
