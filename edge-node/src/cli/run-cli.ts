// `zenova-node` command dispatch: turns argv into an exit code. Usage and config problems are one
// clear line on stderr (exit 2), never a stack.
import { LocalConfigError } from '../config/local-config.js';
import { createLogger } from '../logger.js';
import { UsageError, parseCli } from './args.js';
import { serve } from './serve.js';

export interface CliIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
}

export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  let command;
  try {
    command = parseCli(argv);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    io.stderr.write(`zenova-node: ${err.message}\n\n${err.usage}`);
    return 2;
  }
  if (command.kind === 'help') {
    io.stdout.write(command.text);
    return 0;
  }
  try {
    return await serve({ configFile: command.configFile, listen: command.listen, logger: createLogger() });
  } catch (err) {
    if (!(err instanceof LocalConfigError)) throw err;
    io.stderr.write(`zenova-node: bad config file ${err.message}\n`);
    return 2;
  }
}
