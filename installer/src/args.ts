/**
 * Option parsing shared by the commands: node:util parseArgs in strict mode (unknown options are
 * usage errors) plus the value checks every command needs (whole numbers, comma lists, one NAME).
 */
import { parseArgs } from 'node:util';
import type { ParseArgsConfig } from 'node:util';
import { parseArgsProblem } from '../../proto/src/index.js';
import { givenValue, joinNegativeNumberValues, OPTION_SHAPE } from '../../proto/src/cli-usage-errors.js';
import { NODE_NAME_PATTERN, NODE_NAME_RULE } from '../../proto/src/node-name.js';
import { UsageError } from './cli-context.js';

export type OptionSpec = NonNullable<ParseArgsConfig['options']>;

export interface ParsedArgs {
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
}

/** True when argv asks for help anywhere, so `create --help` works without the required options. */
export function wantsHelp(argv: readonly string[]): boolean {
  return argv.includes('--help') || argv.includes('-h');
}

/**
 * `--name VALUE` → `--name=VALUE` for the options in `dashValued`, up to a `--`: parseArgs (strict)
 * refuses a separate value starting with '-' as ambiguous, and some values do (`--since -1h`). A
 * following `--option` is left alone, so `--since --lines 5` stays a usage error.
 */
export function joinDashValues(argv: readonly string[], dashValued: readonly string[]): string[] {
  const joined: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') return [...joined, ...argv.slice(i)];
    const value = argv[i + 1];
    if (value !== undefined && !value.startsWith('--') && arg.startsWith('--') && dashValued.includes(arg.slice(2))) {
      joined.push(`${arg}=${value}`);
      i++;
    } else {
      joined.push(arg);
    }
  }
  return joined;
}

/**
 * `dashValued`: string options whose separate value may begin with '-' (see joinDashValues). Every
 * string option also takes a separate negative number (`--lines -5`, joinNegativeNumberValues), so
 * that the option's own check refuses it in our words rather than parseArgs as "ambiguous".
 */
export function parseOptions(argv: readonly string[], options: OptionSpec, helpCommand: string, dashValued: readonly string[] = []): ParsedArgs {
  let parsed;
  try {
    const args = joinNegativeNumberValues(joinDashValues(argv, dashValued), options);
    parsed = parseArgs({ args, options, strict: true, allowPositionals: true, tokens: true });
  } catch (err) {
    throw new UsageError(parseArgsProblem(err, Object.keys(options)), helpCommand);
  }
  // parseArgs keeps the last of a repeated option: `delete --name a --name b` would act on b alone.
  const seen = new Set<string>();
  for (const token of parsed.tokens) {
    if (token.kind !== 'option' || options[token.name]?.type !== 'string' || options[token.name]?.multiple === true) continue;
    if (seen.has(token.name)) throw new UsageError(`--${token.name} is given more than once: give it once`, helpCommand);
    seen.add(token.name);
  }
  return { values: parsed.values as ParsedArgs['values'], positionals: parsed.positionals };
}

export function stringOption(parsed: ParsedArgs, name: string): string | undefined {
  const value = parsed.values[name];
  return typeof value === 'string' ? value : undefined;
}

export function flagOption(parsed: ParsedArgs, name: string): boolean {
  return parsed.values[name] === true;
}

export function requiredOption(parsed: ParsedArgs, name: string, helpCommand: string): string {
  const value = stringOption(parsed, name);
  if (value === undefined || value.trim() === '') throw new UsageError(`--${name} is required`, helpCommand);
  return value;
}

/** A typo of a number (`two`, `12x`, `1e3`) is named back; a longer word (a pasted token, say) is not. */
const NUMBERLIKE_WORD = /^[A-Za-z0-9.+-]{1,12}$/;

/** The largest whole number an option takes here: nine digits, well inside a safe integer. */
const MAX_INTEGER_OPTION = 999_999_999;

/**
 * A whole number option (range rules are the API's, so they live in one place; only the upper
 * bound of what this parser takes is checked here, and said as such).
 */
export function integerOption(parsed: ParsedArgs, name: string, helpCommand: string): number | undefined {
  const value = stringOption(parsed, name);
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value.trim())) throw new UsageError(`--${name} must be a whole number, ${givenValue(value, NUMBERLIKE_WORD, 'a number')}`, helpCommand);
  const number = Number(value.trim());
  if (number > MAX_INTEGER_OPTION) throw new UsageError(`--${name} must be at most ${MAX_INTEGER_OPTION}, got ${JSON.stringify(value)}`, helpCommand);
  return number;
}

/**
 * A string option that may be left out but, given, must not be empty: an empty value is an unset
 * variable, and taken as given it would act elsewhere ('' resolves to the current dir).
 * `instead`: what to pass, or what leaving it out does.
 */
export function nonEmptyOption(parsed: ParsedArgs, name: string, helpCommand: string, instead: string): string | undefined {
  const value = stringOption(parsed, name);
  if (value !== undefined && value.trim() === '') throw new UsageError(`--${name} is empty (an unset shell variable?): ${instead}`, helpCommand);
  return value;
}

/** `a,b , c` → ['a','b','c']; an empty list is a usage error. */
export function listOption(parsed: ParsedArgs, name: string, helpCommand: string): string[] | undefined {
  const value = stringOption(parsed, name);
  if (value === undefined) return undefined;
  const items = value.split(',').map((s) => s.trim()).filter((s) => s !== '');
  if (items.length === 0) throw new UsageError(`--${name} needs at least one value (comma-separated)`, helpCommand);
  return items;
}

/** The one positional NAME a command takes (`what`: how the usage names it, e.g. COMPONENT). */
export function singlePositional(parsed: ParsedArgs, what: string, helpCommand: string): string {
  const [first, ...extra] = parsed.positionals;
  if (first === undefined || first.trim() === '') throw new UsageError(`${what} is required`, helpCommand);
  if (extra.length > 0) throw new UsageError(strayArgumentMessage(extra, `after ${what}`, `zenova ${helpCommand} takes one ${what}`), helpCommand);
  return first;
}

/**
 * "unexpected argument" for values no option takes: where they were, never what they were (a
 * stray value is often a token pasted without its option, and an error line lands in terminals,
 * shell logs and support tickets). Only
 * a first word shaped like an option is named (it got there after `--`, which ends the options);
 * the words after it are not.
 */
function strayArgumentMessage(words: readonly string[], where: string, advice: string): string {
  const [first] = words;
  if (first !== undefined && OPTION_SHAPE.test(first)) {
    return `unexpected argument ${JSON.stringify(first)}: no word after -- is an option; ${advice}`;
  }
  return `unexpected argument: ${words.length === 1 ? 'a value' : `${words.length} values`} ${where} (not shown: it may be a token); ${advice}`;
}

/** Whether `word` may be named in a message: shaped like a node name, not like a pasted token. */
export function looksLikeNodeName(word: string): boolean {
  return NODE_NAME_PATTERN.test(word);
}

/** Said in place of a word not shaped like a node name. */
export const NODE_NAME_NOT_SHOWN = '(not shown: not a node name, it may be a token)';

/**
 * The node NAME of a gateway-node subcommand: the positional, or `--name NAME` as seed 004 §9.6
 * writes it. Both given must agree, so a mistyped one never picks a node silently.
 */
export function nodeNameArgument(parsed: ParsedArgs, helpCommand: string): string {
  return notDotSegment(namedNode(parsed, helpCommand), helpCommand);
}

/**
 * `.` and `..` pass encodeURIComponent unchanged and URL resolution removes them, so the request
 * would reach another route (`delete ..` was DELETE /api/v1/). No node has such a name.
 */
function notDotSegment(name: string, helpCommand: string): string {
  if (name === '.' || name === '..') throw new UsageError(`${JSON.stringify(name)} is not a node name: a node name ${NODE_NAME_RULE}`, helpCommand);
  return name;
}

function namedNode(parsed: ParsedArgs, helpCommand: string): string {
  const option = stringOption(parsed, 'name');
  const [first, ...extra] = parsed.positionals;
  if (option === undefined && (first === undefined || first.trim() === '')) throw new UsageError('NAME (or --name NAME) is required', helpCommand);
  if (option !== undefined && option.trim() === '') throw new UsageError('--name needs the node name', helpCommand);
  if (extra.length > 0) throw new UsageError(strayArgumentMessage(extra, 'after NAME', `zenova ${helpCommand} takes one NAME (or --name NAME)`), helpCommand);
  if (option === undefined) return first!;
  if (first !== undefined && first !== option) {
    const shown = (name: string): string => (looksLikeNodeName(name) ? JSON.stringify(name) : NODE_NAME_NOT_SHOWN);
    throw new UsageError(`NAME ${shown(first)} and --name ${shown(option)} differ: give the node name once`, helpCommand);
  }
  return option;
}

/**
 * Refuses arguments that are not options, without quoting them (one may be a secret: an enrollment
 * or admin token pasted without its option). `example`: an option of the command to show how a
 * value is given; without it the message points to --help.
 */
export function noPositionals(parsed: ParsedArgs, helpCommand: string, { example }: { example?: string } = {}): void {
  if (parsed.positionals.length === 0) return;
  const advice = example === undefined ? `give each value after its option (zenova ${helpCommand} --help lists them)` : `give each value after its option, e.g. ${example}`;
  throw new UsageError(strayArgumentMessage(parsed.positionals, 'not given after an option', advice), helpCommand);
}
