// Whether a process is still alive, for status, the control link lock (a holder that died) and the
// spool (an open row of a replica still serving is not an interrupted request).
import { readFileSync, readlinkSync } from 'node:fs';

/** Whether `pid` is a live process (EPERM: alive but someone else's). */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** This process's pid namespace (`pid:[4026531836]`); null where /proc does not tell. */
export function pidNamespace(): string | null {
  try {
    return readlinkSync('/proc/self/ns/pid');
  } catch {
    return null;
  }
}

/** Field 22 of /proc/PID/stat (start time in clock ticks since boot); null when unknown. */
export function processStartTicks(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces: count after its last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] ?? null;
  } catch {
    return null;
  }
}

/** A process as another one records it: enough to tell later whether that very process still runs. */
export interface ProcessMark {
  pid: number;
  pidNs: string | null;
  startTicks: string | null;
}

export function thisProcessMark(): ProcessMark {
  return { pid: process.pid, pidNs: pidNamespace(), startTicks: processStartTicks(process.pid) };
}

/**
 * Whether the marked process still runs, as far as this process can tell: a mark from another pid
 * namespace (or one /proc did not describe) cannot be checked by pid, so it counts as alive; a pid
 * now held by a process started at another time (pid reuse) counts as dead.
 */
export function isMarkedProcessAlive(mark: ProcessMark, here: string | null = pidNamespace()): boolean {
  if (mark.pidNs === null || here === null || mark.pidNs !== here) return true;
  if (!isProcessAlive(mark.pid)) return false;
  if (mark.startTicks !== null) {
    const ticks = processStartTicks(mark.pid);
    if (ticks !== null && ticks !== mark.startTicks) return false;
  }
  return true;
}
