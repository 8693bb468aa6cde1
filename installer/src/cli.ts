#!/usr/bin/env node
/**
 * `zenova`, the host CLI. Dispatches `zenova <command> …` to installer/src/commands/<command>.ts
 * (loaded on demand, so a command's dependencies cost nothing to the others) and turns every
 * failure into one clear line and an exit code: 0 done, 1 refused / unreachable / failed,
 * 2 bad usage or settings.
 */
import { pathToFileURL } from 'node:url';
import { launcherCommand } from './cli-launcher.js';
import { CommandFailure, EXIT_FAILURE, EXIT_OK, EXIT_USAGE, UsageError } from './cli-context.js';
import type { CliContext, Command } from './cli-context.js';
import { ApiError, ConnectionError, UnexpectedResponseError } from './connection/admin-client.js';
import { productVersion } from '../../proto/src/product-version.js';
import { unknownCommandMessage, wordsAfterTopFlagProblem } from '../../proto/src/cli-usage-errors.js';
import { dropOutputToClosedPipes } from '../../proto/src/cli-closed-output.js';

const PROGRAM = 'zenova';

const COMMANDS: Record<string, () => Promise<Command>> = {
  'gateway-node': async () => (await import('./commands/gateway-node.js')).gatewayNodeCommand,
  install: async () => (await import('./commands/install.js')).installCommand,
  status: async () => (await import('./commands/status.js')).statusCommand,
  logs: async () => (await import('./commands/logs.js')).logsCommand,
};

/** What `zenova help COMMAND SUB` takes as SUB: a subcommand's shape (`node`, `create`), no token's. */
const SUBCOMMAND_SHAPE = /^[a-z][a-z-]{1,30}$/;

export const MAIN_USAGE = `Usage: ${PROGRAM} <command> [options]

Commands:
  gateway-node   Create and manage gateway nodes (admin API of the control plane)
  install node   Install a gateway node on this host (host checks first; --check-only)
  status         Show the gateway node installed on this host (--json)
  logs           Show the journal of a node component (node-edge, node-updater; node-caddy shows node-edge)

Run "${PROGRAM} <command> --help" for a command's options; "${PROGRAM} --version" prints the release.
Exit codes: 0 done, 1 refused, failed or a blocking finding (nothing written), 2 bad usage or settings.
`;

/**
 * `zenova --version`, `--help` and `help` take no more words: one after them (`--version <TOKEN>`,
 * a token pasted in the wrong place) is a usage error that says where it was, never what it was,
 * as the commands' own stray arguments are refused (args.ts); only an option-shaped first word is
 * named (proto's wordsAfterTopFlagProblem, as zenova-node and zenova-control say it).
 */
function refuseWordsAfter(flag: string, words: readonly string[]): void {
  const problem = wordsAfterTopFlagProblem(PROGRAM, flag, words);
  if (problem !== undefined) throw new UsageError(problem, undefined);
}

function report(err: unknown, ctx: CliContext): number {
  if (err instanceof UsageError) {
    const hint = err.helpCommand === undefined ? '' : `Run "${PROGRAM} ${err.helpCommand} --help" for usage.\n`;
    ctx.stderr.write(`${PROGRAM}: ${err.message}\n${hint}`);
    return EXIT_USAGE;
  }
  if (err instanceof ApiError) {
    ctx.stderr.write(`${PROGRAM}: error ${err.code}: ${err.message}\n`);
    // A value the control plane's rules refuse (--replicas 0, an http:// URL) is bad usage, as one
    // the CLI refuses itself; a refusal of a valid request (a name taken, a node not found) is not.
    return err.code === 'ZN_ERR_CP_INVALID_REQUEST' ? EXIT_USAGE : EXIT_FAILURE;
  }
  if (err instanceof ConnectionError || err instanceof UnexpectedResponseError || err instanceof CommandFailure) {
    ctx.stderr.write(`${PROGRAM}: ${err.message}\n`);
    return EXIT_FAILURE;
  }
  throw err;
}

export async function runCli(argv: readonly string[], ctx: CliContext): Promise<number> {
  const [name, ...rest] = argv;
  try {
    if (name === undefined) throw new UsageError('no command given', undefined);
    if (name === '--help' || name === '-h' || name === 'help') {
      // `zenova help install`: that command's help, as `zenova install --help` prints it; and
      // `zenova help install node` (the name as the usage above lists it) or `help gateway-node
      // create`: as `COMMAND SUB --help` prints it. Only a short lower-case word is taken as SUB,
      // never what could be a token pasted there.
      const [topic, sub] = rest;
      if (topic !== undefined && Object.hasOwn(COMMANDS, topic)) {
        if (rest.length === 1) return await (await COMMANDS[topic]!()).run(['--help'], ctx);
        if (rest.length === 2 && sub !== undefined && SUBCOMMAND_SHAPE.test(sub)) return await (await COMMANDS[topic]!()).run([sub, '--help'], ctx);
      }
      refuseWordsAfter(name, rest);
      ctx.stdout.write(MAIN_USAGE);
      return EXIT_OK;
    }
    if (name === '--version') {
      refuseWordsAfter(name, rest);
      ctx.stdout.write(`${productVersion()}\n`);
      return EXIT_OK;
    }
    const load = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
    if (load === undefined) throw new UsageError(unknownCommandMessage(name, Object.keys(COMMANDS), ['help', 'version']), undefined);
    return await (await load()).run(rest, ctx);
  } catch (err) {
    const code = report(err, ctx);
    if (code === EXIT_USAGE && (name === undefined || !Object.hasOwn(COMMANDS, name))) ctx.stderr.write(`\n${MAIN_USAGE}`);
    return code;
  }
}

// Run only as the entry point, so tests can import runCli.
const entry = process.argv[1];
if (entry !== undefined && import.meta.url === pathToFileURL(entry).href) {
  dropOutputToClosedPipes(process.stdout, process.stderr);
  const cwd = process.cwd();
  const launcher = launcherCommand(import.meta.url, cwd);
  runCli(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr, stdin: process.stdin, env: process.env, cwd, ...(launcher !== undefined ? { launcher } : {}) }).then(
    (code) => { process.exitCode = code; },
    (err: unknown) => {
      process.stderr.write(`${PROGRAM}: unexpected failure: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
