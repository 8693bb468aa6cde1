// `zenova-node status`: the node's identity and control link, as text or one JSON object.
import { StateAccessDeniedError, StateDirMissingError, StateDirPathError, StateFileError, openStateStore } from '../state/state-store.js';
import { formatNodeStatus, readNodeStatus } from '../status/node-status.js';
import type { NodeStatusReport } from '../status/node-status.js';
import type { CliCommand } from './args.js';
import type { CliIo } from './cli-io.js';

type StatusCommand = Extract<CliCommand, { kind: 'status' }>;

/** What to do when this user may not read the state dir: nothing is wrong with the node. */
export const STATUS_ACCESS_ADVICE = "run `zenova-node status` as the node's user or as root (sudo): whether this node is enrolled is unknown to this user";

export async function runStatusCommand(command: StatusCommand, io: CliIo): Promise<number> {
  try {
    const store = await openStateStore(command.stateDir, { create: false });
    const report = await readNodeStatus(store);
    io.stdout.write(command.json ? `${JSON.stringify(statusJson(report), null, 2)}\n` : formatNodeStatus(report));
    return report.enrolled ? 0 : 1;
  } catch (err) {
    if (!(err instanceof StateDirMissingError || err instanceof StateFileError)) throw err;
    // A dir that can never be a state dir (under /proc, /sys, /dev) is a bad command line, not a node that is not enrolled.
    if (err instanceof StateDirPathError) {
      if (command.json) io.stdout.write(`${JSON.stringify(unreadReport(command.stateDir, false, err.message))}\n`);
      io.stderr.write(`zenova-node: ${err.message}; pass --state-dir with the node's state directory\n`);
      return 2;
    }
    // Run as a user that may not read the node's files: the node may well be enrolled (and serving),
    // so `enrolled` is unknown (null), never false, and the advice is to ask as the node's user.
    if (err instanceof StateAccessDeniedError) {
      if (command.json) io.stdout.write(`${JSON.stringify(unreadReport(command.stateDir, null, err.message, STATUS_ACCESS_ADVICE))}\n`);
      io.stderr.write(`zenova-node: cannot read the state dir ${command.stateDir}: ${err.message}\nwhat to do: ${STATUS_ACCESS_ADVICE}\n`);
      return 1;
    }
    const advice = damagedAdvice(err);
    if (command.json) io.stdout.write(`${JSON.stringify(unreadReport(command.stateDir, false, err.message, advice))}\n`);
    io.stderr.write(`zenova-node: ${err.message}\n${advice !== undefined ? `what to do: ${advice}\n` : ''}`);
    return 1;
  }
}

/**
 * The JSON report of a state dir that could not be read: every field of the full report (null: not
 * known), so a monitor reads `control.connected` or `credential` the same way, plus `error` and
 * `advice`. `enrolled`: false when the dir holds no usable node (missing, damaged), null when this
 * user may not read it (unknown).
 */
function unreadReport(stateDir: string, enrolled: boolean | null, error: string, advice?: string): object {
  const control: NodeStatusReport['control'] = {
    running: null,
    pid: null,
    connected: null,
    since: null,
    sessionId: null,
    disconnectedSince: null,
    lastError: null,
    updatedAt: null,
    error: null,
  };
  const report: { [K in keyof NodeStatusReport]-?: K extends 'enrolled' ? boolean | null : NodeStatusReport[K] } = {
    stateDir,
    enrolled,
    node: null,
    controlPlaneUrl: null,
    gateway: null,
    credential: null,
    control,
    config: null,
    configWarning: null,
    previousEnrollmentWarning: null,
    spool: null,
    spoolLimits: null,
    disk: null,
    clock: null,
    deleted: null,
    credentialRevoked: null,
  };
  return { ...report, error, ...(advice !== undefined ? { advice } : {}) };
}

/**
 * The report as `--json` gives it: an unreadable spool's backlog and open counts are null, not the 0
 * they are read as, which a monitor would take for "all delivered" (the installer's statusJson too).
 */
function statusJson(report: NodeStatusReport): object {
  const { spool } = report;
  if (spool === null || spool.error === null) return report;
  return { ...report, spool: { ...spool, backlog: null, open: null } };
}

/**
 * A damaged identity or credential file is only cured by enrolling again (doctor says the same);
 * one this process may not read is not damaged (its message says how to give it back).
 */
function damagedAdvice(err: Error): string | undefined {
  if (!(err instanceof StateFileError) || err instanceof StateAccessDeniedError) return undefined;
  if (!/(identity|credential)\.json$/.test(err.file)) return undefined;
  return 're-enroll: on the control plane run `zenova gateway-node reenroll-command NAME`, then run the printed command on this host (`zenova-node doctor` checks the other files)';
}
