// `zenova-node` command dispatch: turns argv into an exit code. Usage, config and state problems are
// one clear line on stderr (exit 2), never a stack.
import path from 'node:path';
import { TOP_FLAGS_TAKING_NO_WORDS, wordsAfterTopFlagProblem } from '../../../proto/src/cli-usage-errors.js';
import { productVersion } from '../../../proto/src/product-version.js';
import { LocalConfigError } from '../config/local-config.js';
import { ReconnectSettingsError } from '../control/reconnect-settings.js';
import { ReplicaSettingError } from '../rate-limit/create-node-rate-limiter.js';
import { createLogger } from '../logger.js';
import { StateDirMissingError, StateDirPathError, StateFileError, pseudoFilesystemProblem } from '../state/state-store.js';
import { CallerTlsError } from '../tls/caller-tls.js';
import { MAIN_USAGE, UsageError, parseCli } from './args.js';
import type { CliIo } from './cli-io.js';
import { runDoctorCommand } from './doctor-command.js';
import { runEnrollCommand } from './enroll-command.js';
import { checkReplicasAgainstEnv, superviseReplicas } from './replica-supervisor.js';
import { replicaWorker } from './replica-worker.js';
import { ListenFailedError, NotEnrolledError, serve } from './serve.js';
import { ServeSettingError, readLogLevel } from './serve-settings.js';
import { runStatusCommand } from './status-command.js';

export type { CliIo } from './cli-io.js';

/** The commands `zenova-node help COMMAND` shows the help of (parseCli's). */
const NODE_COMMANDS = ['serve', 'enroll', 'status', 'doctor'];

/**
 * `zenova-node --version`, `--help` and `help` take no more words: one after them (often a token
 * pasted in the wrong place) is refused saying where it was, never what it was, as `zenova` does
 * (proto's wordsAfterTopFlagProblem); only an option-shaped first word is named. (A command's own
 * `--help` is parseCli's.)
 */
function refuseWordsAfterTopFlag(argv: readonly string[]): void {
  const [flag, ...words] = argv;
  if (flag === undefined || !TOP_FLAGS_TAKING_NO_WORDS.includes(flag)) return;
  const problem = wordsAfterTopFlagProblem('zenova-node', flag, words);
  if (problem !== undefined) throw new UsageError(problem, MAIN_USAGE);
}

export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  let command;
  try {
    // `zenova-node help enroll`: that command's help, as `zenova-node enroll --help` prints it.
    const [flag, topic] = argv;
    const asked = argv.length === 2 && ['--help', '-h', 'help'].includes(flag ?? '') && NODE_COMMANDS.includes(topic ?? '') ? [topic!, '--help'] : argv;
    refuseWordsAfterTopFlag(asked);
    command = parseCli(asked, process.env);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    io.stderr.write(`zenova-node: ${err.message}\n\n${err.usage}`);
    return 2;
  }
  switch (command.kind) {
    case 'help':
      io.stdout.write(command.text);
      return 0;
    case 'version':
      io.stdout.write(`${productVersion()}\n`);
      return 0;
    case 'enroll':
      return runEnrollCommand(command, io);
    case 'status':
      return runStatusCommand(command, io);
    case 'doctor':
      return runDoctorCommand(command, io);
    case 'serve':
      break;
  }
  try {
    if (command.replicas !== undefined) checkReplicasAgainstEnv(command.replicas, process.env);
    // The supervisor's and each replica's (they inherit its environment).
    const level = readLogLevel(process.env);
    // A replica the supervisor started runs the same command line: it serves.
    const replica = replicaWorker();
    if (command.replicas !== undefined && command.replicas > 1 && replica === undefined) {
      // Said once here, not by each of K replicas the supervisor would start only to have them refuse it.
      const { stateDir } = command;
      const pseudo = stateDir === undefined ? undefined : await pseudoFilesystemProblem(stateDir);
      if (stateDir !== undefined && pseudo !== undefined) throw new StateDirPathError(path.resolve(stateDir), pseudo);
      return await superviseReplicas({
        replicas: command.replicas,
        listen: command.listen,
        ...(command.adminListen !== undefined ? { adminListen: command.adminListen } : {}),
        ...(stateDir !== undefined ? { stateDir } : {}),
        env: process.env,
        logger: createLogger({ batched: true, level }),
      });
    }
    const logger = createLogger({ batched: true, level });
    return await serve({
      ...(command.configFile !== undefined ? { configFile: command.configFile } : {}),
      ...(command.stateDir !== undefined ? { stateDir: command.stateDir } : {}),
      listen: command.listen,
      ...(command.adminListen !== undefined ? { adminListen: command.adminListen } : {}),
      ...(command.tls !== undefined ? { tls: command.tls } : {}),
      // Each replica's lines name it; they reach the journal through the supervisor's output.
      logger: replica !== undefined ? logger.child({ replica: replica.index }) : logger,
    });
  } catch (err) {
    // A port that cannot be bound: the operator's to fix, said in one line (exit 1, as before).
    if (err instanceof ListenFailedError) {
      io.stderr.write(`zenova-node: ${err.message}\n`);
      return 1;
    }
    if (err instanceof LocalConfigError) {
      io.stderr.write(`zenova-node: bad config file ${err.message}\n`);
      return 2;
    }
    if (
      err instanceof NotEnrolledError ||
      err instanceof StateDirMissingError ||
      err instanceof StateFileError ||
      err instanceof ReconnectSettingsError ||
      err instanceof ReplicaSettingError ||
      err instanceof ServeSettingError ||
      err instanceof CallerTlsError
    ) {
      io.stderr.write(`zenova-node: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
}
