/**
 * What every `zenova` command runs with: its output streams, the environment and the working
 * directory (passed in, never read from `process`, so a command can run in-process in a test), and
 * the errors that decide the exit code.
 */

export interface CliContext {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: Readonly<Record<string, string | undefined>>;
  cwd: string;
  /** The command's standard input (`--token-file -`); undefined when it has none (in-process runs). */
  stdin?: AsyncIterable<Buffer | string> & { isTTY?: boolean };
  /** How the operator runs this CLI (`./zenova`, a full path); undefined when unknown (cli-launcher.ts). */
  launcher?: string;
  /** Now, for "12s ago" columns; a parameter so output does not depend on when a test runs. */
  now?: () => Date;
}

/** A command module: `cli.ts` finds it by name and hands it the rest of argv. */
export interface Command {
  name: string;
  summary: string;
  usage: string;
  run(argv: readonly string[], ctx: CliContext): Promise<number>;
}

export const EXIT_OK = 0;
/** The control plane refused, could not be reached, or a local file could not be written. */
export const EXIT_FAILURE = 1;
/** Bad command line or missing/invalid settings: nothing was sent. */
export const EXIT_USAGE = 2;

/**
 * A command line or setting that cannot run: the CLI prints the message and, when `helpCommand` is
 * given, where the usage is (`zenova <helpCommand> --help`); exit 2.
 */
export class UsageError extends Error {
  readonly helpCommand: string | undefined;
  constructor(message: string, helpCommand?: string) {
    super(message);
    this.name = 'UsageError';
    this.helpCommand = helpCommand;
  }
}

/** A failure already explained in one line (a local file, an unexpected answer); exit 1. */
export class CommandFailure extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'CommandFailure';
  }
}

export function currentTime(ctx: CliContext): Date {
  return ctx.now?.() ?? new Date();
}
