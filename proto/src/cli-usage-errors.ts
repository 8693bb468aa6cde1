/**
 * Command-line usage errors in the words all three programs use (zenova, zenova-node,
 * zenova-control), from node:util parseArgs' errors: a mistyped option gets the option it most
 * likely meant, and an argument given without its option is never quoted back (it is often a token
 * pasted without `--token`, and an error line lands in terminals, scrollback and CI logs).
 */

/** What an option name looks like; anything else is not quoted (it may be a pasted secret). */
export const OPTION_SHAPE = /^--?[A-Za-z][A-Za-z0-9-]{0,40}$/;

/** The shape of a number that a message may name back: a sign and up to ten digits (givenValue's usual shape). */
export const NUMBER_SHAPE = /^[+-]?\d{1,10}$/;

/** givenValue's words around the value, for a message that does not say `got …`. */
export interface GivenValueWords {
  /** Before the quoted value; default `got `. */
  readonly shown?: string;
  /** In the value's place, before the "(not shown: …)" note; default `got a value that is not one`. */
  readonly notShown?: string;
}

/**
 * `got "…"` for an option's or a variable's value that has the shape expected (`looksRight`: that
 * shape, or whether `raw` has it), else `got a value that is not one (not shown: it does not look
 * like SHAPE)`: never the value, since it may be a token pasted in the wrong place, and an error
 * line lands in terminals, scrollback, the journal and CI logs. `shape` names what was expected,
 * with its article (`a number`, `HOST:PORT`, `an http(s) URL`).
 */
export function givenValue(raw: string, looksRight: boolean | RegExp, shape: string, words: GivenValueWords = {}): string {
  const shown = typeof looksRight === 'boolean' ? looksRight : looksRight.test(raw);
  return shown ? `${words.shown ?? 'got '}${JSON.stringify(raw)}` : `${words.notShown ?? 'got a value that is not one'} (not shown: it does not look like ${shape})`;
}

/**
 * Edit distance between two short strings (options are a few dozen characters at most), with two
 * neighbouring letters swapped as one edit: `lsit` is one from `list`, as `--jsno` from `--json`.
 */
function editDistance(a: string, b: string): number {
  let beforePrevious: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) current[j] = Math.min(current[j]!, beforePrevious[j - 2]! + 1);
    }
    beforePrevious = previous;
    previous = current;
  }
  return previous[b.length]!;
}

/**
 * The known option (`--name`) closest to `given`, when close enough to be a typo of it: at most a
 * third of its length apart (two edits for most options), or one that starts with `given` (`--stat`).
 */
export function closestOption(given: string, known: readonly string[]): string | undefined {
  const bare = given.replace(/^-+/, '').toLowerCase();
  if (bare.length === 0) return undefined;
  let best: { name: string; distance: number } | undefined;
  for (const name of known) {
    const distance = name.startsWith(bare) && bare.length >= 3 ? 0 : editDistance(bare, name.toLowerCase());
    if (distance <= Math.max(1, Math.floor(name.length / 3)) && (best === undefined || distance < best.distance)) best = { name, distance };
  }
  return best === undefined ? undefined : `--${best.name}`;
}

/** The flags that print and exit, by the name `known` lists them under: they never take a value. */
const VALUELESS_FLAGS: Readonly<Record<string, string>> = { '--version': 'version', '--help': 'help', '-h': 'help' };

/**
 * "unknown option --pakage; did you mean --package?" for an option not in `known` (names without dashes).
 * With a value after `=`: `--version=x` (a flag that prints and exits, in `known`) is said to take
 * none, an unknown option is named without its value; a known option that does take a value (`zenova
 * logs -- --since=2h`, read as a word) gets the message a word of another shape gets. The value is
 * never shown (it may be a pasted token).
 */
export function unknownOptionMessage(given: string, known: readonly string[]): string {
  const eq = given.indexOf('=');
  const name = eq > 0 ? given.slice(0, eq) : '';
  const flag = Object.hasOwn(VALUELESS_FLAGS, name) ? VALUELESS_FLAGS[name] : undefined;
  if (flag !== undefined && known.includes(flag)) {
    return `option ${name} takes no value (given one after "=", not shown: it may be a token); see --help for the options`;
  }
  if (OPTION_SHAPE.test(name) && !known.includes(name.replace(/^-+/, ''))) return unknownOptionMessage(name, known);
  if (!OPTION_SHAPE.test(given)) return 'unknown option (not shown: it does not look like an option name); see --help for the options';
  const suggestion = closestOption(given, known);
  return suggestion === undefined ? `unknown option ${given}; see --help for the options` : `unknown option ${given}; did you mean ${suggestion}?`;
}

/** What a command name looks like; anything else is not quoted (it may be a pasted secret). */
const COMMAND_SHAPE = /^[A-Za-z][A-Za-z0-9-]{0,40}$/;

/** How a group names the words it takes, for unknownCommandMessage (`component`, `gateway-node command`). */
export interface CommandWords {
  /** What a word is called in the message; default `command`. */
  readonly noun?: string;
  /** Listed as "one of: …" when no suggestion fits; without them the message points to --help. */
  readonly choices?: readonly string[];
}

/**
 * "unknown command "stauts"; did you mean status?" for a first word that is not a command, and for
 * an option there the option it most likely meant (`--verison`: `--version`, among `topOptions`);
 * a word of another shape is never quoted back. Sub-words (`gateway-node lsit`, `logs node-egde`)
 * use it too, naming their words through `words`.
 */
export function unknownCommandMessage(given: string, commands: readonly string[], topOptions: readonly string[], words: CommandWords = {}): string {
  if (given.startsWith('-')) return unknownOptionMessage(given, topOptions);
  const noun = words.noun ?? 'command';
  const elsewhere = words.choices === undefined ? `see --help for the ${noun}s` : `one of: ${words.choices.join(', ')}`;
  const article = /^[aeiou]/i.test(noun) ? 'an' : 'a';
  if (!COMMAND_SHAPE.test(given)) return `unknown ${noun} (not shown: it does not look like ${article} ${noun} name); ${elsewhere}`;
  const suggestion = closestOption(given, commands)?.replace(/^--/, '');
  return suggestion === undefined ? `unknown ${noun} ${JSON.stringify(given)}; ${elsewhere}` : `unknown ${noun} ${JSON.stringify(given)}; did you mean ${suggestion}?`;
}

/**
 * The message for a value given where no option takes it: where it was, never what it was.
 * `example`: one of the command's own value-taking options with its value's name (`--state-dir
 * DIR`), shown as how a value is given; without one the advice points to --help, never to an
 * option the command does not have.
 */
export function unexpectedValueMessage(example?: string): string {
  const advice = example === undefined ? 'see --help for the options' : `e.g. ${example}`;
  return `unexpected argument: a value not given after an option (not shown: it may be a token); give each value after its option, ${advice}`;
}

/** unexpectedValueMessage without an example, for a command that names none. */
export const UNEXPECTED_VALUE_MESSAGE = unexpectedValueMessage();

/** How parseArgsProblem advises a command. */
export interface ParseArgsWords {
  /** One of the command's value-taking options with its value's name (`--state-dir DIR`), for a stray value's advice. */
  readonly valueExample?: string;
}

/**
 * parseArgs' error as a usage message: an unknown option with a suggestion, a stray value unquoted
 * (with the command's own option as the example, `words.valueExample`), the rest as parseArgs says
 * it (those quote only option names).
 */
export function parseArgsProblem(err: unknown, known: readonly string[], words: ParseArgsWords = {}): string {
  const code = (err as { code?: unknown }).code;
  const message = err instanceof Error ? err.message : String(err);
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    const given = /^Unknown option '([^']*)'/.exec(message)?.[1] ?? '';
    return unknownOptionMessage(given, known);
  }
  if (code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') return unexpectedValueMessage(words.valueExample);
  return message;
}

/** The top-level flags that print and exit, and so take no more words: `--version`, `--help`, `-h`, `help`. */
export const TOP_FLAGS_TAKING_NO_WORDS: readonly string[] = ['--version', '--help', '-h', 'help'];

/** How wordsAfterTopFlagProblem advises a program. */
export interface TopFlagWords {
  /** Whether the program has commands of its own, each with its `--help` (zenova, zenova-node); default true. */
  readonly commands?: boolean;
}

/**
 * The usage message for words after a top-level `--version`, `--help`, `-h` or `help` (`flag`) of
 * `program`, or undefined when `words` is empty. A word there is often a token pasted in the wrong
 * place: the message says where it was and how many, never what it was; only an option-shaped
 * first word (`--json`) is named. All three programs (zenova, zenova-node, zenova-control) use it.
 */
export function wordsAfterTopFlagProblem(program: string, flag: string, words: readonly string[], how: TopFlagWords = {}): string | undefined {
  const [first] = words;
  if (first === undefined) return undefined;
  const commandHelp = flag !== '--version' && how.commands !== false ? `; for a command's options run "${program} <command> --help"` : '';
  const advice = `${program} ${flag} takes no arguments${commandHelp}`;
  if (OPTION_SHAPE.test(first)) return `unexpected argument ${JSON.stringify(first)} after ${flag}: ${advice}`;
  return `unexpected argument: ${words.length === 1 ? 'a value' : `${words.length} values`} after ${flag} (not shown: it may be a token); ${advice}`;
}

/** What repeatedOptionProblem reads of parseArgs' options and tokens (`tokens: true`). */
export interface OptionKinds {
  readonly [name: string]: { readonly type: 'string' | 'boolean'; readonly multiple?: boolean | undefined };
}
export interface OptionToken {
  readonly kind: string;
  readonly name?: string;
}

/** A negative number (`-5`, `-1.5`): no option is named by a digit, so it is never an option. */
export const NEGATIVE_NUMBER = /^-\d+(?:\.\d+)?$/;

/**
 * `--name -5` → `--name=-5` for every value option (`type: 'string'`) in `options`, up to a `--`:
 * parseArgs (strict) refuses a separate value starting with '-' as "ambiguous" and tells the
 * operator to write `--lines=-XYZ`, only for the value to be refused then. Joined, the value reaches
 * the option's own check, which refuses a negative number in our words (`--lines must be a whole
 * number, got "-5"`). Only a negative number is joined: `--lines --json` stays a usage error.
 */
export function joinNegativeNumberValues(argv: readonly string[], options: OptionKinds): string[] {
  const joined: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') return [...joined, ...argv.slice(i)];
    const value = argv[i + 1];
    const name = arg.startsWith('--') ? arg.slice(2) : undefined;
    if (value !== undefined && name !== undefined && Object.hasOwn(options, name) && options[name]?.type === 'string' && NEGATIVE_NUMBER.test(value)) {
      joined.push(`${arg}=${value}`);
      i++;
    } else {
      joined.push(arg);
    }
  }
  return joined;
}

/**
 * "--token is given more than once: give it once" for the first value option given twice, else
 * undefined. parseArgs keeps the last of a repeated option, so `--token A --token B` would use B
 * and drop A unnoticed. Names the option only, never a value (it may be a token). A flag given
 * twice loses nothing; an option declared `multiple` takes every value.
 */
export function repeatedOptionProblem(tokens: readonly OptionToken[], options: OptionKinds): string | undefined {
  const seen = new Set<string>();
  for (const token of tokens) {
    if (token.kind !== 'option' || token.name === undefined) continue;
    const option = options[token.name];
    if (option?.type !== 'string' || option.multiple === true) continue;
    if (seen.has(token.name)) return `--${token.name} is given more than once: give it once`;
    seen.add(token.name);
  }
  return undefined;
}
