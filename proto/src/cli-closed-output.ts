/**
 * Keeps a command-line program running when the reader of its output goes away (`| head`, a
 * `| tee` that died): Node reports the failed write as an 'error' event on process.stdout, which,
 * unhandled, ends the process at once — an install mid-way, before its rollback and the release of
 * its lock ran. Output to a closed pipe is dropped instead; the exit code still says how it went.
 * Any other stream error ends the process as before.
 */
export function dropOutputToClosedPipes(...streams: NodeJS.WritableStream[]): void {
  for (const stream of streams) {
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EPIPE' || err.code === 'ERR_STREAM_DESTROYED') return;
      throw err;
    });
  }
}
