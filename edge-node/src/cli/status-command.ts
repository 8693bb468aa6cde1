// `zenova-node status`: the node's identity and control link, as text or one JSON object.
import { StateDirMissingError, StateFileError, openStateStore } from '../state/state-store.js';
import { formatNodeStatus, readNodeStatus } from '../status/node-status.js';
import type { CliCommand } from './args.js';
import type { CliIo } from './cli-io.js';

type StatusCommand = Extract<CliCommand, { kind: 'status' }>;

export async function runStatusCommand(command: StatusCommand, io: CliIo): Promise<number> {
  try {
    const store = await openStateStore(command.stateDir, { create: false });
    const report = await readNodeStatus(store);
    io.stdout.write(command.json ? `${JSON.stringify(report, null, 2)}\n` : formatNodeStatus(report));
    return report.enrolled ? 0 : 1;
  } catch (err) {
    if (!(err instanceof StateDirMissingError || err instanceof StateFileError)) throw err;
    if (command.json) io.stdout.write(`${JSON.stringify({ stateDir: command.stateDir, enrolled: false, error: err.message })}\n`);
    io.stderr.write(`zenova-node: ${err.message}\n`);
    return 1;
  }
}
