/**
 * CPU time a process has used (user + system, all threads), from /proc/<pid>/stat. CPU per request
 * is the one figure a busy 2-core machine does not distort much: latency and req/s move with what
 * else runs, the work a gateway does per request does not.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

let ticksPerSecond: number | undefined;

function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    const out = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    ticksPerSecond = Number.isFinite(out) && out > 0 ? out : 100;
  }
  return ticksPerSecond;
}

/** Seconds of CPU `pid` has used so far; undefined when it cannot be read (not Linux, gone). */
export function cpuSecondsOf(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces) start at state; utime and stime are
    // fields 14 and 15 of the whole line, i.e. 12th and 13th after ") ".
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(rest[11]) + Number(rest[12])) / clockTicks();
  } catch {
    return undefined;
  }
}
