/**
 * `zenova gateway-node <subcommand>`: manage gateway nodes through the control plane's admin API.
 * Each subcommand lives in gateway-node/<name>.ts and is loaded only when used.
 */
import { EXIT_OK, UsageError } from '../cli-context.js';
import type { CliContext, Command } from '../cli-context.js';
import { CA_VARIABLE, DEFAULT_ENV_FILE, TOKEN_VARIABLE, URL_VARIABLE } from '../connection/connection-settings.js';
import { unknownCommandMessage } from '../../../proto/src/cli-usage-errors.js';

const SUBCOMMANDS: Record<string, () => Promise<Command>> = {
  create: async () => (await import('./gateway-node/create.js')).createCommand,
  list: async () => (await import('./gateway-node/list.js')).listCommand,
  show: async () => (await import('./gateway-node/show.js')).showCommand,
  'install-command': async () => (await import('./gateway-node/one-time-commands.js')).installCommandCommand,
  'reenroll-command': async () => (await import('./gateway-node/one-time-commands.js')).reenrollCommandCommand,
  'upgrade-command': async () => (await import('./gateway-node/one-time-commands.js')).upgradeCommandCommand,
  delete: async () => (await import('./gateway-node/delete.js')).deleteCommand,
};

const USAGE = `Usage: zenova gateway-node <command> [options]

Creates and manages the gateway nodes of a control plane through its admin API.

Commands:
  create --name N --address A [...]   Create a node and print its one-time install command
  list                                List the nodes with status, version and live figures
  show NAME                           Show one node
  install-command NAME                Issue a new one-time install command
  reenroll-command NAME               Issue a one-time re-enroll command
  upgrade-command NAME                Issue a one-time upgrade command
  delete NAME --yes                   Delete a node (revokes its credentials, closes its connection)

NAME may also be given as --name NAME (e.g. reenroll-command --name edge-sh-01).

Connection, for every command:
  ${URL_VARIABLE}   The control plane's URL, e.g. https://cp.example.com:7400
  ${TOKEN_VARIABLE}         The admin bearer token (never printed)
  ${CA_VARIABLE}             PEM of the CA that verifies the control plane's HTTPS
                             (default: the system trust store; verification is never skipped)
  They are read from --env-file F when given, else from the environment, else (when none of them
  is set) from the file the dev stack writes: $ZENOVA_DEV_HOME/dev.env when ZENOVA_DEV_HOME is
  set, else ${DEFAULT_ENV_FILE} in the current directory.

Run "zenova gateway-node <command> --help" for a command's options.
`;

async function run(argv: readonly string[], ctx: CliContext): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined) throw new UsageError('no gateway-node command given', 'gateway-node');
  if (name === '--help' || name === '-h' || name === 'help') {
    ctx.stdout.write(USAGE);
    return EXIT_OK;
  }
  const load = Object.hasOwn(SUBCOMMANDS, name) ? SUBCOMMANDS[name] : undefined;
  // Quoted only when shaped like a command: a token pasted here would land in the terminal and logs.
  if (load === undefined) throw new UsageError(unknownCommandMessage(name, Object.keys(SUBCOMMANDS), ['help'], { noun: 'gateway-node command' }), 'gateway-node');
  return (await load()).run(rest, ctx);
}

export const gatewayNodeCommand: Command = { name: 'gateway-node', summary: 'Create and manage gateway nodes', usage: USAGE, run };
