// Whether a pid names a live process, for status and the control link lock (a holder that died).

/** Whether `pid` is a live process (EPERM: alive but someone else's). */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
