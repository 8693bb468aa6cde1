/**
 * `zenova logs COMPONENT [--since T] [--lines N]`: the journal of a node component, through
 * journalctl (`--since '30 min ago'` is journalctl's own syntax and passes through). T is checked
 * against the characters journalctl's time specs use, and always passed as one argument.
 */
import { integerOption, parseOptions, singlePositional, stringOption, wantsHelp } from '../args.js';
import { CommandFailure, EXIT_OK, UsageError } from '../cli-context.js';
import type { CliContext, Command } from '../cli-context.js';
import { realHostEnv } from '../host/host-env.js';
import type { HostEnv } from '../host/host-env.js';
import { NODE_UNIT, NO_NODE_INSTALLED, UPDATER_UNIT } from '../install/install-layout.js';

const HELP = 'logs';

export const COMPONENT_UNITS: Record<string, string> = { 'node-edge': NODE_UNIT, 'node-updater': UPDATER_UNIT };

/**
 * Components the seed's troubleshooting names (§9.5 `zenova logs node-caddy`) that this release
 * has no unit for: node-edge serves callers itself, so its journal is the one to read.
 */
const STAND_INS: Record<string, { component: string; note: string }> = {
  'node-caddy': { component: 'node-edge', note: 'zenova: node-caddy: there is no separate ingress proxy in this release (node-edge serves callers itself); showing the node-edge log.\n' },
};

export const LOGS_USAGE = `Usage: zenova logs COMPONENT [--since T] [--lines N]

Shows the journal of a node component on this host.

  COMPONENT     ${Object.keys(COMPONENT_UNITS).join(' | ')}
                (node-caddy: no separate ingress proxy in this release; shows node-edge's log)
  --since T     e.g. '30 min ago', '2 hours ago', today, yesterday, '2026-11-29 08:00', -1h
  --lines N     at most the last N lines

Exit codes: journalctl's own (0 shown); 1 no node is installed here (and the journal holds
nothing of an earlier one) or journalctl cannot run; 2 bad usage.
`;

/** A journalctl time spec: letters, digits, spaces and the punctuation of dates and offsets. */
export function sinceProblem(value: string): string | undefined {
  if (value.trim() === '') return 'must not be empty';
  if (value.length > 64) return 'must be at most 64 characters';
  if (!/^[A-Za-z0-9 :+.-]+$/.test(value)) return "may contain only letters, digits, spaces and : + . - (e.g. '30 min ago')";
  return undefined;
}

/** Whether the journal holds any line of `unit` (journalctl's own lines, such as "-- No entries --", begin with "-- "). */
async function hasJournalEntries(host: HostEnv, unit: string): Promise<boolean> {
  let text = '';
  await host.services.journal(unit, { lines: 1 }, { write: (chunk: string) => (text += chunk) }, { write: () => undefined });
  return text.split('\n').some((line) => line.trim() !== '' && !line.startsWith('-- '));
}

export async function runLogs(argv: readonly string[], ctx: CliContext, host: HostEnv): Promise<number> {
  if (wantsHelp(argv)) {
    ctx.stdout.write(LOGS_USAGE);
    return EXIT_OK;
  }
  // `--since -1h` (journalctl's relative time) begins with '-'.
  const parsed = parseOptions(argv, { since: { type: 'string' }, lines: { type: 'string' } }, HELP, ['since']);
  const named = singlePositional(parsed, 'COMPONENT', HELP);
  const standIn = Object.hasOwn(STAND_INS, named) ? STAND_INS[named] : undefined;
  const component = standIn?.component ?? named;
  const unit = Object.hasOwn(COMPONENT_UNITS, component) ? COMPONENT_UNITS[component] : undefined;
  if (unit === undefined) throw new UsageError(`unknown component ${JSON.stringify(component)}; one of: ${Object.keys(COMPONENT_UNITS).join(', ')}`, HELP);
  const since = stringOption(parsed, 'since');
  if (since !== undefined) {
    const problem = sinceProblem(since);
    if (problem !== undefined) throw new UsageError(`--since ${problem}`, HELP);
  }
  const lines = integerOption(parsed, 'lines', HELP);
  if (lines !== undefined && lines < 1) throw new UsageError('--lines must be at least 1', HELP);
  if ((await host.services.readUnit(NODE_UNIT)) === undefined) {
    // A first install that failed removed its units but kept data/, and its NODE-SERVICE-START
    // advice sends the operator here for that run's log: only an empty journal means no node.
    if (!(await hasJournalEntries(host, unit))) throw new CommandFailure(`${NO_NODE_INSTALLED}, so there is no ${component} log to show`);
    ctx.stderr.write(`zenova: note: ${NO_NODE_INSTALLED}; showing what the journal kept of an earlier one.\n`);
  }
  if (standIn !== undefined) ctx.stderr.write(standIn.note);
  return host.services.journal(unit, { ...(since !== undefined ? { since: since.trim() } : {}), ...(lines !== undefined ? { lines } : {}) }, ctx.stdout, ctx.stderr);
}

export function logsCommandFor(host: () => HostEnv): Command {
  return { name: 'logs', summary: 'Show the journal of a node component', usage: LOGS_USAGE, run: (argv, ctx) => runLogs(argv, ctx, host()) };
}

export const logsCommand: Command = logsCommandFor(realHostEnv);
