// Command-line parsing for `zenova-node` (node:util parseArgs, strict: unknown flags are errors).
import { parseArgs } from 'node:util';

export const DEFAULT_LISTEN = '127.0.0.1:7480';

export const MAIN_USAGE = `Usage: zenova-node <command> [options]

Commands:
  serve     Serve the caller API (OpenAI-compatible) from a local config file

Options:
  -h, --help  Show this help

Run "zenova-node <command> --help" for a command's options.
`;

export const SERVE_USAGE = `Usage: zenova-node serve --config FILE [--listen HOST:PORT]

Options:
  --config FILE         Local JSON config: upstreams, models, API key hashes, limits
  --listen HOST:PORT    Address for callers (default ${DEFAULT_LISTEN}; port 0 picks a free port;
                        IPv6 as [::1]:7480)
  -h, --help            Show this help
`;

export interface ListenAddress {
  host: string;
  port: number;
}

export type CliCommand =
  | { kind: 'help'; text: string }
  | { kind: 'serve'; configFile: string; listen: ListenAddress };

/** A command line that cannot run; the CLI prints the message and `usage` to stderr, exit 2. */
export class UsageError extends Error {
  readonly usage: string;
  constructor(message: string, usage: string) {
    super(message);
    this.name = 'UsageError';
    this.usage = usage;
  }
}

/** `HOST:PORT` or `[IPv6]:PORT` → host (brackets removed) and port 0–65535. */
export function parseListenAddress(value: string): ListenAddress {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]\s]+)):(\d{1,5})$/.exec(value);
  const host = match?.[1] ?? match?.[2];
  const port = Number(match?.[3]);
  if (host === undefined || !Number.isInteger(port) || port > 65535) {
    throw new UsageError(`--listen must be HOST:PORT with a port from 0 to 65535, got ${JSON.stringify(value)}`, SERVE_USAGE);
  }
  return { host, port };
}

export function parseCli(argv: readonly string[]): CliCommand {
  const [command, ...rest] = argv;
  if (command === undefined) throw new UsageError('no command given', MAIN_USAGE);
  if (command === '-h' || command === '--help' || command === 'help') return { kind: 'help', text: MAIN_USAGE };
  if (command === 'serve') return parseServe(rest);
  throw new UsageError(`unknown command ${JSON.stringify(command)}`, MAIN_USAGE);
}

function parseServe(argv: string[]): CliCommand {
  let values: { config?: string; listen?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        config: { type: 'string' },
        listen: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    throw new UsageError((err as Error).message, SERVE_USAGE);
  }
  if (values.help === true) return { kind: 'help', text: SERVE_USAGE };
  if (values.config === undefined || values.config === '') throw new UsageError('serve needs --config FILE', SERVE_USAGE);
  return { kind: 'serve', configFile: values.config, listen: parseListenAddress(values.listen ?? DEFAULT_LISTEN) };
}
