/**
 * The serving daemon's stdout, written in batches (logger.ts): lines gather until `batchChars`
 * are waiting or `batchMs` have passed since the first of them, then go out in one synchronous
 * write. flush() writes at once; the logger calls it for warnings and errors, and on exit.
 *
 * Why not pino.destination({ minLength }): sonic-boom appends each line to one growing string and
 * measures that string's byte length on every write, which flattens it, so the copying grows with
 * the square of the lines per batch (≈ 4 KB per 450-byte line at 8 KiB batches). On the node it
 * was the largest single allocation site. Here a batch is an array joined once.
 *
 * A write that fails for good (stdout closed: EPIPE, EBADF) drops that batch and the daemon goes
 * on serving: its records are in the spool, and there is nowhere left to say so. A full pipe
 * (EAGAIN, when stdout is non-blocking) is retried for up to MAX_BLOCKED_MS.
 */
import { writeSync } from 'node:fs';

const MAX_BLOCKED_MS = 2000;
const BLOCKED_PAUSE_MS = 5;
const pause = new Int32Array(new SharedArrayBuffer(4));

export class BatchedLogWriter {
  private lines: string[] = [];
  private waiting = 0;
  private timer: NodeJS.Timeout | undefined;
  /** Lines dropped because stdout could not take them (for tests and diagnostics). */
  dropped = 0;

  constructor(
    private readonly fd: number,
    private readonly batchChars: number,
    private readonly batchMs: number,
  ) {}

  /** pino's destination interface: one serialised line, newline included. */
  write(line: string): boolean {
    this.lines.push(line);
    this.waiting += line.length;
    if (this.waiting >= this.batchChars) this.flush();
    else if (this.timer === undefined) {
      this.timer = setTimeout(this.onTimer, this.batchMs);
      // The timer never keeps the process alive; exit flushes what waits.
      this.timer.unref();
    }
    return true;
  }

  /** Writes what waits, now. */
  flush(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.lines.length === 0) return;
    const count = this.lines.length;
    const text = count === 1 ? this.lines[0]! : this.lines.join('');
    this.lines = [];
    this.waiting = 0;
    if (!writeFully(this.fd, Buffer.from(text, 'utf8'))) this.dropped += count;
  }

  private readonly onTimer = (): void => {
    this.timer = undefined;
    this.flush();
  };
}

/** Writes all of `data` (a pipe may take part of it); false when stdout cannot take it. */
function writeFully(fd: number, data: Buffer): boolean {
  let rest = data;
  let blockedSince: number | undefined;
  while (rest.length > 0) {
    try {
      rest = rest.subarray(writeSync(fd, rest));
      blockedSince = undefined;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') return false;
      blockedSince ??= Date.now();
      if (Date.now() - blockedSince > MAX_BLOCKED_MS) return false;
      Atomics.wait(pause, 0, 0, BLOCKED_PAUSE_MS);
    }
  }
  return true;
}
