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
import { unknownCommandMessage } from '../../../proto/src/cli-usage-errors.js';

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
  --since T     e.g. '30 min ago', '2 hours ago', today, yesterday, '2026-11-29 08:00', -1h,
                @1700000000 (seconds since the epoch), '2026-11-29 08:00 Asia/Shanghai' (a zone)
  --lines N     at most the last N lines

Exit codes: journalctl's own (0 shown); 1 no node is installed here (and the journal holds
nothing of an earlier one) or journalctl cannot run; 2 bad usage.
`;

/** The time span units of systemd.time(7), matched as journalctl matches them (case-sensitive: M is months, m minutes). */
const SPAN_UNITS = new Set([
  'usec', 'us', 'msec', 'ms', 'seconds', 'second', 'sec', 's', 'minutes', 'minute', 'min', 'm',
  'hours', 'hour', 'hr', 'h', 'days', 'day', 'd', 'weeks', 'week', 'w', 'months', 'month', 'M', 'years', 'year', 'y',
]);
const WEEKDAYS = new Set(['sun', 'sunday', 'mon', 'monday', 'tue', 'tuesday', 'wed', 'wednesday', 'thu', 'thursday', 'fri', 'friday', 'sat', 'saturday']);
const DATE = /^(\d{1,2}|\d{4})-(\d{1,2})-(\d{1,2})$/;
const TIME = /^(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.\d+)?)?$/;

/** A systemd time span: numbers (a fraction allowed), each with a unit or else followed by a space or the end: `1h 30min`, `5s500ms`, `90`. */
function isTimeSpan(text: string): boolean {
  let rest = text;
  let parts = 0;
  for (;;) {
    rest = rest.trimStart();
    if (rest === '') return parts > 0;
    const number = /^\+?(?:\d+(?:\.\d+)?|\.\d+)/.exec(rest)?.[0];
    if (number === undefined) return false;
    rest = rest.slice(number.length);
    const unit = /^\s*([A-Za-z]+)/.exec(rest);
    if (unit !== null) {
      if (!SPAN_UNITS.has(unit[1] ?? '')) return false;
      rest = rest.slice(unit[0].length);
    } else if (rest !== '' && !/^\s/.test(rest)) {
      return false; // `5.5.5`: a number must end in a unit, a space or the end
    }
    parts += 1;
  }
}

function isClockTime(text: string): boolean {
  const m = TIME.exec(text);
  return m !== null && Number(m[1]) <= 23 && Number(m[2]) <= 59 && Number(m[3] ?? 0) <= 61;
}

const MONTHS = new Set(['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec']);

/**
 * journalctl's own short timestamp, `MON DD HH:MM:SS[.frac]` (`Nov 29 08:00:00`, what `zenova logs`
 * prints, so an operator copies it): journalctl reads it with the seconds, not without.
 */
function isShortJournalTime(text: string): boolean {
  const m = /^([A-Za-z]{3}) +(\d{1,2}) +(\d{1,2}:\d{2}:\d{2}(?:\.\d+)?)$/.exec(text);
  if (m === null || !MONTHS.has((m[1] ?? '').toLowerCase())) return false;
  const day = Number(m[2]);
  return day >= 1 && day <= 31 && isClockTime(m[3] ?? '');
}

/**
 * `[WEEKDAY ]YYYY-MM-DD[ HH:MM[:SS[.frac]]]` (or YY-MM-DD), `[WEEKDAY ]MON DD HH:MM:SS[.frac]`, or a
 * time of today `HH:MM[:SS[.frac]]`.
 */
function isDateTime(text: string): boolean {
  let rest = text;
  const weekday = /^([A-Za-z]+) (.*)$/.exec(rest);
  if (weekday !== null && WEEKDAYS.has((weekday[1] ?? '').toLowerCase())) rest = weekday[2] ?? '';
  else if (isClockTime(rest)) return true;
  if (isShortJournalTime(rest)) return true;
  // Newer journalctl also reads RFC 3339 (`2026-11-29T08:00:00Z`, `+02:00`); an older one says itself that it does not.
  const m = /^(\d+-\d+-\d+)(?:(?: +|T)(\d[\d:.]*?))?(?:Z|[+-]\d\d:?\d\d)?$/.exec(rest);
  const date = DATE.exec(m?.[1] ?? '');
  if (m === null || date === null) return false;
  const year = Number(date[1]);
  if ((date[1] ?? '').length === 4 && year < 1970) return false;
  if (Number(date[2]) < 1 || Number(date[2]) > 12 || Number(date[3]) < 1 || Number(date[3]) > 31) return false;
  return m[2] === undefined || isClockTime(m[2]);
}

/**
 * Whether journalctl reads `text` as a time (systemd.time(7)): now, today, yesterday, tomorrow; a
 * span before or after now (`-1h`, `+5min`, `30 min ago`, `2 hours left`); a date and time; seconds
 * since the epoch (`@1700000000`). A last word naming a time zone (`UTC`, `Asia/Shanghai`, the
 * host's own) is left to journalctl, which knows the zones.
 */
function isJournalTime(text: string): boolean {
  if (text === 'now' || /^@\d{1,12}(?:\.\d{1,6})?$/.test(text)) return true;
  if (text.startsWith('-') || text.startsWith('+')) return isTimeSpan(text.slice(1));
  const relative = /^(.*) (?:ago|left)$/.exec(text);
  if (relative !== null) return isTimeSpan(relative[1] ?? '');
  const zoned = /^(.*\S) +[A-Za-z][A-Za-z0-9_+/-]*$/.exec(text);
  const candidates = zoned === null ? [text] : [text, zoned[1] ?? ''];
  return candidates.some((t) => t === 'today' || t === 'yesterday' || t === 'tomorrow' || isDateTime(t));
}

/** A journalctl time spec: its characters, and then its form, so a typo is a usage error rather than journalctl's "Failed to parse timestamp". */
export function sinceProblem(value: string): string | undefined {
  if (value.trim() === '') return 'must not be empty';
  if (value.length > 64) return 'must be at most 64 characters';
  if (!/^[A-Za-z0-9 :+.@/_-]+$/.test(value)) return "may contain only letters, digits, spaces and : + . @ / _ - (e.g. '30 min ago')";
  if (!isJournalTime(value.trim())) {
    return `${JSON.stringify(value.trim())} is not a time journalctl reads; use e.g. '30 min ago', '2 hours ago', -1h, today, yesterday, '2026-11-29 08:00', '2026-11-29 08:00:00 UTC', '2026-11-29 08:00 Asia/Shanghai' or @1700000000`;
  }
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
  if (unit === undefined) {
    // A stand-in is a fine suggestion too (`node-cady`); a word not shaped like a component (a pasted token) is not quoted.
    const known = [...Object.keys(COMPONENT_UNITS), ...Object.keys(STAND_INS)];
    throw new UsageError(unknownCommandMessage(component, known, ['since', 'lines'], { noun: 'component', choices: Object.keys(COMPONENT_UNITS) }), HELP);
  }
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
