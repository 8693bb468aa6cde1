/**
 * Test-only: a real systemd booted in systemd-nspawn on the host's own root, volatile
 * (`-D / --volatile=yes`: the host's /usr read-only, everything else a fresh tmpfs, so the
 * container is a clean host that has only what /usr gives it and nothing here leaks to the real
 * host). Without --private-network the container shares the host's network: 127.0.0.1 inside is
 * the host's, so a control plane started by the test is reachable. Commands run inside through
 * nsenter into the container's namespaces (no machined/D-Bus needed on the host).
 */
import { execFile, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { promisify } from 'node:util';
import { waitFor } from '../fixtures/wait-for.js';

const run = promisify(execFile);
const CONTAINER_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface ExecResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface Container {
  name: string;
  /** PID (on the host) of the container's systemd. */
  leader: number;
  exec(command: string, opts?: { timeoutMs?: number }): Promise<ExecResult>;
  /** Powers the container off (SIGTERM to nspawn = orderly shutdown), killing it after a deadline. */
  stop(): Promise<void>;
  /** nspawn's own output (the boot log), for diagnosis. */
  console(): string;
}

async function onPath(cmd: string): Promise<boolean> {
  return run('sh', ['-c', `command -v ${cmd}`]).then(() => true, () => false);
}

/** Why a container cannot be booted here, or undefined when it can be tried. */
export async function nspawnUnavailable(): Promise<string | undefined> {
  if (process.platform !== 'linux') return `not Linux (${process.platform})`;
  if (process.getuid?.() !== 0) return 'not running as root (systemd-nspawn needs root)';
  for (const cmd of ['systemd-nspawn', 'nsenter']) {
    if (!(await onPath(cmd))) return `${cmd} is not installed (apt-get install systemd-container util-linux)`;
  }
  if (!existsSync('/usr/lib/systemd/systemd') && !existsSync('/lib/systemd/systemd')) return 'systemd is not installed (apt-get install systemd)';
  return undefined;
}

function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // The ppid is the 2nd field after the ")" that closes the command name.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) out.push(Number(entry));
    } catch {
      // The process ended while we looked.
    }
  }
  return out;
}

function findLeader(nspawnPid: number): number | undefined {
  const queue = [nspawnPid];
  while (queue.length > 0) {
    const pid = queue.shift()!;
    for (const child of childrenOf(pid)) {
      try {
        if (readFileSync(`/proc/${child}/comm`, 'utf8').trim() === 'systemd') return child;
      } catch {
        continue;
      }
      queue.push(child);
    }
  }
  return undefined;
}

export async function bootContainer(opts: { name: string; bindReadOnly: Array<{ host: string; container: string }>; bootTimeoutMs?: number }): Promise<Container> {
  const args = ['--keep-unit', '--register=no', '-D', '/', '--volatile=yes', '-M', opts.name, '--console=passive'];
  for (const b of opts.bindReadOnly) args.push(`--bind-ro=${b.host}:${b.container}`);
  // A tmpfs /etc is a first boot: skip the interactive first-boot wizard.
  args.push('-b', '--', 'systemd.firstboot=off');
  let output = '';
  const proc: ChildProcess = spawn('systemd-nspawn', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  proc.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  let gone = false;
  void exited.then(() => (gone = true));
  const stop = async (): Promise<void> => {
    if (gone) return;
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
    await exited;
    clearTimeout(timer);
  };
  try {
    const deadline = opts.bootTimeoutMs ?? 90_000;
    const leader = await waitFor(() => {
      if (gone) throw new Error(`systemd-nspawn exited: ${output.slice(-2000)}`);
      return proc.pid === undefined ? undefined : findLeader(proc.pid);
    }, { what: 'the container systemd', timeoutMs: deadline, intervalMs: 100 });
    const exec = (command: string, o: { timeoutMs?: number } = {}): Promise<ExecResult> =>
      new Promise((resolve, reject) => {
        // env -i inside: the test runner adds NODE_OPTIONS to every child it spawns, which must not
        // reach the container (it names files of this checkout).
        const inner = ['/usr/bin/env', '-i', `PATH=${CONTAINER_PATH}`, 'LANG=C.UTF-8', 'SYSTEMD_PAGER=', 'SYSTEMD_COLORS=0', '/bin/sh', '-c', command];
        const child = spawn('nsenter', ['-t', String(leader), '-m', '-u', '-i', '-p', '--', ...inner], {
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
        child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        const timer = setTimeout(() => child.kill('SIGKILL'), o.timeoutMs ?? 120_000);
        child.once('error', reject);
        child.once('close', (code) => {
          clearTimeout(timer);
          resolve({ code: code ?? -1, stdout, stderr });
        });
      });
    await waitFor(async () => {
      if (gone) throw new Error(`the container stopped while booting: ${output.slice(-2000)}`);
      const state = (await exec('systemctl is-system-running')).stdout.trim();
      return state === 'running' || state === 'degraded';
    }, { what: 'the container to finish booting', timeoutMs: deadline, intervalMs: 250 });
    return { name: opts.name, leader, exec, stop, console: () => output };
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * Every path on the container's own (tmpfs) root with its type, mode, size and mtime, sorted:
 * two equal listings mean nothing was written. Kernel and runtime filesystems and the journal
 * (which the container's systemd writes on its own) are left out; -xdev keeps /usr and the binds out.
 */
export async function listRoot(container: Container): Promise<string> {
  const r = await container.exec("find / -xdev \\( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp -o -path /var/tmp -o -path /var/log/journal \\) -prune -o -printf '%p %y %m %s %T@\\n' | sort");
  if (r.code !== 0) throw new Error(`listing the container failed: ${r.stderr}`);
  return r.stdout;
}
