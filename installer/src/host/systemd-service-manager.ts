// The real ServiceManager: unit files in /etc/systemd/system, systemctl and journalctl run with
// execFile/spawn (never a shell, so no argument is ever interpreted).
import { execFile, spawn } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { writeFileAtomic } from '../../../edge-node/src/state/atomic-write.js';
import type { RestartRecord, ServiceManager, ServiceState } from './service-manager.js';

const SYSTEMCTL_TIMEOUT_MS = 120_000;
/** How long restart() waits for the new invocation: past node-edge's TimeoutStopSec (30 s). */
const RESTART_SWITCH_MS = 45_000;
const STATES: readonly ServiceState[] = ['active', 'activating', 'deactivating', 'inactive', 'failed'];

export class SystemctlError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SystemctlError';
  }
}

function systemctl(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('systemctl', args, { timeout: SYSTEMCTL_TIMEOUT_MS }, (err, stdout, stderr) => {
      if (err) reject(new SystemctlError(`systemctl ${args.join(' ')} failed: ${(stderr || err.message).trim().split('\n')[0] ?? ''}`));
      else resolve(stdout);
    });
  });
}

/** ExecMainCode is a CLD_* code (waitid(2)): how the main process ended, with ExecMainStatus. */
function lastExit(code: string | undefined, status: string | undefined): string | undefined {
  if (code === '1') return `exited with status ${status ?? '?'}`;
  if (code === '2') return `was killed by signal ${status ?? '?'}`;
  if (code === '3') return `dumped core on signal ${status ?? '?'}`;
  return undefined;
}

/** `systemctl show -p …` output (KEY=VALUE lines) → the restart record. */
export function parseRestartRecord(text: string): RestartRecord | undefined {
  const props = new Map(text.split('\n').flatMap((line) => {
    const eq = line.indexOf('=');
    return eq > 0 ? [[line.slice(0, eq), line.slice(eq + 1).trim()] as const] : [];
  }));
  const restarts = Number(props.get('NRestarts'));
  if (!Number.isSafeInteger(restarts) || restarts < 0) return undefined;
  return { restarts, lastExit: lastExit(props.get('ExecMainCode'), props.get('ExecMainStatus')) };
}

export function systemdServiceManager(unitDir = '/etc/systemd/system'): ServiceManager {
  const unitPath = (name: string): string => path.join(unitDir, path.basename(name));
  return {
    async readUnit(name) {
      try {
        return await readFile(unitPath(name), 'utf8');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
        throw err;
      }
    },
    async writeUnit(name, text) {
      await writeFileAtomic(unitPath(name), text, 0o644);
    },
    async removeUnit(name) {
      await rm(unitPath(name), { force: true });
    },
    async reload() {
      await systemctl(['daemon-reload']);
    },
    async enable(name) {
      await systemctl(['enable', name]);
    },
    async disable(name) {
      await systemctl(['disable', name]);
    },
    async start(name) {
      // --no-block: readiness is awaited by the installer with its own deadline and messages.
      await systemctl(['start', '--no-block', name]);
    },
    async stop(name) {
      await systemctl(['stop', name]);
    },
    async restart(name) {
      // --no-block as start: the job is queued (and run to its end by systemd, whatever becomes of
      // this process); readiness is awaited apart. But not before the old process is gone: until
      // systemd stops it, it could answer that readiness check itself. Each start is a new invocation.
      const invocation = (): Promise<string> => systemctl(['show', '-p', 'InvocationID', '--value', name]).then((out) => out.trim(), () => '');
      const before = await invocation();
      await systemctl(['restart', '--no-block', name]);
      const deadline = performance.now() + RESTART_SWITCH_MS;
      while (performance.now() < deadline) {
        const now = await invocation();
        if (now !== '' && now !== before) return;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      // Not started within the bound (its stop timing out, say): the readiness wait says what it sees.
    },
    async state(name) {
      // is-active exits non-zero for anything but active; its stdout still names the state.
      const out = await new Promise<string>((resolve) => {
        execFile('systemctl', ['is-active', name], { timeout: SYSTEMCTL_TIMEOUT_MS }, (_err, stdout) => resolve(stdout.trim()));
      });
      return STATES.find((s) => s === out) ?? 'unknown';
    },
    async restartRecord(name) {
      // Diagnostics only: a systemctl that cannot answer leaves the reason as it was.
      return systemctl(['show', '-p', 'NRestarts', '-p', 'ExecMainCode', '-p', 'ExecMainStatus', name]).then(parseRestartRecord, () => undefined);
    },
    journal(unit, opts, out, errOut) {
      const args = ['-u', unit, '--no-pager', ...(opts.since !== undefined ? ['--since', opts.since] : []), ...(opts.lines !== undefined ? ['-n', String(opts.lines)] : [])];
      return new Promise((resolve) => {
        const child = spawn('journalctl', args, { stdio: ['ignore', 'pipe', 'pipe'] });
        child.stdout.on('data', (chunk: Buffer) => out.write(chunk.toString('utf8')));
        child.stderr.on('data', (chunk: Buffer) => errOut.write(chunk.toString('utf8')));
        child.on('error', (err) => {
          errOut.write(`cannot run journalctl: ${err.message}\n`);
          resolve(1);
        });
        child.on('close', (code) => resolve(code ?? 1));
      });
    },
  };
}
