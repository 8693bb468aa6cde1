// Command-line parsing for `zenova-node` (node:util parseArgs, strict: unknown flags are errors).
import { parseArgs } from 'node:util';
import type { ParseArgsConfig } from 'node:util';
import { parseArgsProblem } from '../../../proto/src/index.js';
import { NUMBER_SHAPE, givenValue, joinNegativeNumberValues, repeatedOptionProblem, unknownCommandMessage } from '../../../proto/src/cli-usage-errors.js';
import { givenControlPlaneUrl, parseControlPlaneUrl } from '../enroll/enroll.js';
import { EnrollError } from '../enroll/enroll-errors.js';
import { isLoopbackHost } from '../metrics/admin-server.js';
import type { CallerTlsFiles } from '../tls/caller-tls.js';

export const DEFAULT_LISTEN = '127.0.0.1:7480';

export const MAIN_USAGE = `Usage: zenova-node <command> [options]

Commands:
  serve     Serve the caller API (OpenAI-compatible) and keep the control channel open
  enroll    Join a control plane with a one-time token and save the node's identity
  status    Show the node's identity and whether it is connected to its control plane
  doctor    Check the state directory and the gateway connection; changes nothing

Options:
  -h, --help  Show this help
  --version   Print the node's version

Run "zenova-node <command> --help" for a command's options.
`;

export const SERVE_USAGE = `Usage: zenova-node serve (--state-dir DIR | --config FILE) [--listen HOST:PORT]
                        [--admin-listen HOST:PORT] [--tls-cert FILE --tls-key FILE] [--replicas K]

Options:
  --state-dir DIR       The enrolled node's state directory: the node serves the signed config its
                        control plane pushes (cached in DIR/config, verified at every start), keeps
                        its control link open (outbound gRPC over TLS) and keeps serving callers
                        from the cached config when it cannot reach the control plane.
  --config FILE         Local JSON config (upstreams, models, API key hashes, limits) for a
                        stand-alone node without a control plane. Not with --state-dir: an enrolled
                        node takes its config only from its control plane.
  --listen HOST:PORT    Address for callers (default ${DEFAULT_LISTEN}; port 0 picks a free port;
                        IPv6 as [::1]:7480)
  --admin-listen HOST:PORT
                        Also serve GET /metrics (Prometheus text) and GET /healthz on this address,
                        which must be loopback (127.0.0.1 or [::1]); off by default (with --replicas
                        above 1: also GET /readyz, every replica's readiness). Env:
                        ZENOVA_NODE_ADMIN_LISTEN (the flag wins)
  --tls-cert FILE       Serve callers over HTTPS (TLS 1.2 or later) with this PEM certificate (the
                        server's first, then any intermediates); plain HTTP without it. Env:
                        ZENOVA_NODE_TLS_CERT_FILE (the flag wins)
  --tls-key FILE        The certificate's PEM private key (unencrypted); both or neither. Env:
                        ZENOVA_NODE_TLS_KEY_FILE (the flag wins). SIGHUP (systemctl reload
                        node-edge) reads both files again: a renewed pair is served to new
                        connections, a bad one is refused with a log line and the old one kept
  --replicas K          Run K node-edge processes (1-999, default 1: this process serves alone)
                        sharing the caller port, each with ZENOVA_NODE_REPLICAS=K; this process then
                        supervises them: restarts one that dies, forwards SIGTERM/SIGINT (drain) and
                        SIGHUP (TLS reload), and answers the admin port for all of them (/metrics
                        with a replica label, /healthz, /readyz). Above 1 needs --state-dir
  -h, --help            Show this help

Endpoints besides the OpenAI API: GET /healthz (the process is up), GET /readyz (200 when a
verified config is served, with its version and the control link's state; 503 with the reason).

Environment (the defaults suit production; a bad value stops serve at once, exit 2; all of them
in docs/node-api.md, "Node settings"):
  ZENOVA_NODE_REPLICAS             node-edge processes serving from one state dir (1-999, default 1);
                                   set the same number on every one of them (--replicas K sets it
                                   for the processes it starts; a different value set here is refused)
  ZENOVA_NODE_REPLICA_INDEX        set by --replicas in each process it starts (its slot, 1-K);
                                   ignored in a process it did not start
  ZENOVA_NODE_SUPERVISOR_SAYS_LISTEN_FAILURES
                                   set to 1 by --replicas in each process it starts (it reports
                                   its listen failures to the supervisor); nothing to set by hand
  ZENOVA_NODE_SHUTDOWN_DRAIN_MS    how long requests in flight may run on after SIGTERM (0-20000,
                                   default 10000); those still running then get ZN_ERR_NODE_STOPPING
  ZENOVA_SPOOL_SYNCHRONOUS         normal (default) or full: every spool commit survives power loss
  ZENOVA_LOG_LEVEL                 fatal, error, warn, info (default), debug, trace or silent (any
                                   case): the lowest level of the log lines written
  ZENOVA_DEFAULT_MAX_OUTPUT_TOKENS output tokens reserved for a chat request without a limit
                                   (1-1000000, default 4096)
  ZENOVA_LEASE_REPORT_MS           how often lease spend is reported (1-3600000, default 5000)
  ZENOVA_NODE_LINK_LOCK_INTERVAL_MS  how often replicas renew or try the control link lock
                                   (50-60000, default 2000)
  ZENOVA_NODE_RECONNECT_BASE_MS    first back-off step after a lost control session (default 1000)
  ZENOVA_NODE_RECONNECT_MAX_MS     back-off cap (default 60000)
  ZENOVA_NODE_REFUSED_RETRY_MS     retry interval after a refusal only an operator can fix, such as
                                   an expired credential or a deleted node (default 300000)
  https_proxy, no_proxy            the HTTP proxy to the control plane and its bypass list (also
                                   HTTPS_PROXY, NO_PROXY); callers' upstream calls never use it
`;

export const ENROLL_USAGE = `Usage: zenova-node enroll --control-plane URL (--token TOKEN | --token-file FILE) --state-dir DIR
                         [--ca-file FILE] [--reenroll]

Redeems a one-time install token at the control plane and saves the node's identity, gateway
trust and first credential in DIR (files 0600, directory 0700).

Options:
  --control-plane URL   The control plane's callback URL, as in the install command (its address,
                        not the console page's /console/ path); must be https://
  --token TOKEN         The one-time token from the install command
  --token-file FILE     Read the token from FILE instead, its one non-blank line (keeps it out
                        of the process list); should be readable by its owner only (chmod 600).
                        FILE = - reads it from standard input
  --state-dir DIR       Where the node keeps its state (created 0700 if missing)
  --ca-file FILE        PEM CA that verifies the control plane's certificate (default: the
                        system trust store)
  --reenroll            Replace this state dir's identity using a reenroll token; every other
                        file in DIR (config cache, spool) is kept
  -h, --help            Show this help

Exit status: 0 enrolled, 1 enrollment failed, 2 bad command line.
`;

export const STATUS_USAGE = `Usage: zenova-node status --state-dir DIR [--json]

Shows the node's identity, its control plane and gateway, whether the running node is connected
(or since when it is not, with the last error and what to do), and the config version it serves
and when it was applied (or why it is not ready). An error the link recovered from is shown as
"past error" with when it was resolved, and no advice. A damaged or unreadable control-status.json
(only a mirror of the running node) shows the control link as UNKNOWN with the reason, and the rest
as usual. A node the control plane deleted shows "deleted" (every caller request is refused with
ZN_ERR_NODE_DELETED) with what to do, as soon as the node itself knows it. Changes nothing.

Exit status: 0 enrolled, 1 not enrolled (identity.json or credential.json missing or damaged) or
the state dir not readable by this user (enrolled unknown: run it as the node's user or root),
2 bad command line.

Options:
  --state-dir DIR   The node's state directory
  --json            Print one JSON object instead of text
  -h, --help        Show this help
`;

export const DOCTOR_USAGE = `Usage: zenova-node doctor --state-dir DIR [--tls-cert FILE --tls-key FILE]

Checks the state directory (exists, modes 0700/0600, identity readable, credential not expired),
the config cache as serve loads it at start (config-applied-version.json readable, the cached config
verifies and is not older than the version the node applied), the request spool and the credit
lease book as serve vets them at start, and the gateway (TCP reachable, TLS
certificate trusted and valid for its name), and, with the caller port's TLS files (flags, or
ZENOVA_NODE_TLS_CERT_FILE/ZENOVA_NODE_TLS_KEY_FILE), that the key is the certificate's and how
many days it has left. Changes nothing.

Exit status: 0 all checks passed, 1 a check failed, 2 bad command line.

Options:
  --state-dir DIR   The node's state directory
  --tls-cert FILE   The caller port's certificate, as serve takes it
  --tls-key FILE    Its private key
  -h, --help        Show this help
`;

export interface ListenAddress {
  host: string;
  port: number;
}

export type CliCommand =
  | { kind: 'help'; text: string }
  | { kind: 'version' }
  | {
      kind: 'serve';
      configFile?: string;
      stateDir?: string;
      listen: ListenAddress;
      adminListen?: ListenAddress;
      tls?: CallerTlsFiles;
      /** --replicas, only when given (a supervisor of that many processes when above 1). */
      replicas?: number;
    }
  | {
      kind: 'enroll';
      controlPlaneUrl: string;
      token: { from: 'argument'; value: string } | { from: 'file'; file: string };
      stateDir: string;
      caFile?: string;
      reenroll: boolean;
    }
  | { kind: 'status'; stateDir: string; json: boolean }
  | { kind: 'doctor'; stateDir: string; tls?: CallerTlsFiles };

/** A command line that cannot run; the CLI prints the message and `usage` to stderr, exit 2. */
export class UsageError extends Error {
  readonly usage: string;
  constructor(message: string, usage: string) {
    super(message);
    this.name = 'UsageError';
    this.usage = usage;
  }
}

/**
 * What a listen address a usage message may name looks like: a short HOST:PORT (a host name or IP
 * address, digits for the port). Anything else is not quoted back: it may be a token pasted in the
 * address's place, and an error line lands in terminals, scrollback and CI logs.
 */
const LISTEN_SHAPE = /^(?:\[[0-9A-Fa-f:.]{1,45}\]|[A-Za-z0-9.-]{1,63}):\d{1,10}$/;

/** `HOST:PORT` or `[IPv6]:PORT` → host (brackets removed) and port 0–65535. */
export function parseListenAddress(value: string, flag = '--listen'): ListenAddress {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]\s]+)):(\d{1,5})$/.exec(value);
  const host = match?.[1] ?? match?.[2];
  const port = Number(match?.[3]);
  if (host === undefined || !Number.isInteger(port) || port > 65535) {
    throw new UsageError(`${flag} must be HOST:PORT with a port from 0 to 65535, ${givenValue(value, LISTEN_SHAPE, 'HOST:PORT')}`, SERVE_USAGE);
  }
  return { host, port };
}

/** The admin port's address (flag, else ZENOVA_NODE_ADMIN_LISTEN); loopback only, refused otherwise. */
function parseAdminListen(flagValue: string | undefined, env: NodeJS.ProcessEnv): ListenAddress | undefined {
  const fromEnv = env.ZENOVA_NODE_ADMIN_LISTEN;
  const value = flagValue ?? (fromEnv !== undefined && fromEnv !== '' ? fromEnv : undefined);
  if (value === undefined) return undefined;
  const source = flagValue !== undefined ? '--admin-listen' : 'ZENOVA_NODE_ADMIN_LISTEN';
  const address = parseListenAddress(value, source);
  if (!isLoopbackHost(address.host)) {
    // The host is named when the whole value looks like HOST:PORT.
    const given = givenValue(address.host, LISTEN_SHAPE.test(value), 'a host name or address', { notShown: 'got another host' });
    throw new UsageError(`${source} must be a loopback address (127.0.0.1 or [::1]), ${given}: the admin port (metrics) is never exposed to the network`, SERVE_USAGE);
  }
  return address;
}

/**
 * The caller port's certificate and key files: each flag, else its variable
 * (ZENOVA_NODE_TLS_CERT_FILE, ZENOVA_NODE_TLS_KEY_FILE). Both or neither: one alone would serve
 * plain HTTP where HTTPS was meant, so it is a usage error.
 */
function parseTlsFiles(values: Record<string, string | boolean | undefined>, env: NodeJS.ProcessEnv, usage: string): CallerTlsFiles | undefined {
  const fromEnv = (name: string): string | undefined => (env[name] !== undefined && env[name] !== '' ? env[name] : undefined);
  const certFile = text(values, 'tls-cert', usage) ?? fromEnv('ZENOVA_NODE_TLS_CERT_FILE');
  const keyFile = text(values, 'tls-key', usage) ?? fromEnv('ZENOVA_NODE_TLS_KEY_FILE');
  if (certFile === undefined && keyFile === undefined) return undefined;
  if (certFile === undefined || keyFile === undefined) {
    const [given, missing] = certFile === undefined ? ['--tls-key (ZENOVA_NODE_TLS_KEY_FILE)', '--tls-cert FILE (ZENOVA_NODE_TLS_CERT_FILE)'] : ['--tls-cert (ZENOVA_NODE_TLS_CERT_FILE)', '--tls-key FILE (ZENOVA_NODE_TLS_KEY_FILE)'];
    throw new UsageError(`${given} needs ${missing} too: give both the certificate and its key, or neither for plain HTTP`, usage);
  }
  return { certFile, keyFile };
}

/** `env` supplies ZENOVA_NODE_ADMIN_LISTEN and the TLS file variables for `serve` and `doctor` (none read when omitted). */
export function parseCli(argv: readonly string[], env: NodeJS.ProcessEnv = {}): CliCommand {
  const [command, ...rest] = argv;
  if (command === undefined) throw new UsageError('no command given', MAIN_USAGE);
  if (command === '-h' || command === '--help' || command === 'help') return { kind: 'help', text: MAIN_USAGE };
  if (command === '--version') return { kind: 'version' };
  if (command === 'serve') return parseServe(rest, env);
  if (command === 'enroll') return parseEnroll(rest);
  if (command === 'status') return parseStatus(rest);
  if (command === 'doctor') return parseDoctor(rest, env);
  throw new UsageError(unknownCommandMessage(command, ['serve', 'enroll', 'status', 'doctor'], ['help', 'version']), MAIN_USAGE);
}

type Options = NonNullable<ParseArgsConfig['options']>;

/**
 * parseArgs with strict checking; its errors become UsageErrors carrying the command's usage. An
 * option given twice is refused, as `zenova` refuses it: parseArgs would keep the last one. A
 * separate negative number is taken as an option's value (`--replicas -1`), so the option's own
 * check refuses it rather than parseArgs as "ambiguous". `valueExample`: one of the command's own
 * value options with its value's name (`--state-dir DIR`), the advice for a stray value.
 */
function parseFlags(argv: string[], options: Options, usage: string, valueExample: string): Record<string, string | boolean | undefined> {
  let parsed;
  try {
    parsed = parseArgs({ args: joinNegativeNumberValues(argv, options), options: { ...options, help: { type: 'boolean', short: 'h' } }, strict: true, allowPositionals: false, tokens: true });
  } catch (err) {
    throw new UsageError(parseArgsProblem(err, [...Object.keys(options), 'help'], { valueExample }), usage);
  }
  const repeated = repeatedOptionProblem(parsed.tokens, options);
  if (repeated !== undefined) throw new UsageError(repeated, usage);
  return parsed.values;
}

/** What to pass instead of an empty value, per option (see `text`). */
const EMPTY_VALUE_ADVICE: Record<string, string> = {
  // The node-edge unit runs `serve --listen ${ZENOVA_NODE_LISTEN}` (installer/src/install/unit-files.ts):
  // without that line in its env file systemd passes an empty word.
  listen: `pass --listen HOST:PORT, or leave --listen out for ${DEFAULT_LISTEN}; under systemd, node-edge.service passes --listen \${ZENOVA_NODE_LISTEN}: check that <install dir>/etc/node.env has a line ZENOVA_NODE_LISTEN=HOST:PORT`,
  'admin-listen': 'pass --admin-listen HOST:PORT (loopback), or leave it out (ZENOVA_NODE_ADMIN_LISTEN)',
  'tls-cert': 'pass --tls-cert FILE, or leave it out (ZENOVA_NODE_TLS_CERT_FILE)',
  'tls-key': 'pass --tls-key FILE, or leave it out (ZENOVA_NODE_TLS_KEY_FILE)',
  config: 'pass --config FILE',
  'state-dir': 'pass --state-dir DIR',
  'control-plane': 'pass --control-plane URL, the control plane\'s https:// URL',
  // The installer's words for the same mistake (installer/src/commands/install.ts, checkToken).
  token: 'pass the token from the install command',
  'token-file': 'pass --token-file FILE',
  'ca-file': 'pass --ca-file FILE, or leave it out for the system trust store',
  replicas: 'pass --replicas K (1 to 999), or leave it out for one process',
};

/**
 * A string flag's value. Given but empty is refused, not taken as left out: it is an unset variable
 * (`--listen ${ZENOVA_NODE_LISTEN}`), and a default in its place would go unnoticed.
 */
function text(values: Record<string, string | boolean | undefined>, name: string, usage: string): string | undefined {
  const value = values[name];
  if (typeof value !== 'string') return undefined;
  if (value === '') throw new UsageError(`--${name} is empty (an unset shell variable?): ${EMPTY_VALUE_ADVICE[name] ?? `pass a value to --${name}`}`, usage);
  return value;
}

function parseServe(argv: string[], env: NodeJS.ProcessEnv): CliCommand {
  const values = parseFlags(
    argv,
    {
      config: { type: 'string' },
      'state-dir': { type: 'string' },
      listen: { type: 'string' },
      'admin-listen': { type: 'string' },
      'tls-cert': { type: 'string' },
      'tls-key': { type: 'string' },
      replicas: { type: 'string' },
    },
    SERVE_USAGE,
    '--state-dir DIR',
  );
  if (values.help === true) return { kind: 'help', text: SERVE_USAGE };
  const replicas = parseReplicas(text(values, 'replicas', SERVE_USAGE));
  const configFile = text(values, 'config', SERVE_USAGE);
  const stateDir = text(values, 'state-dir', SERVE_USAGE);
  if (configFile === undefined && stateDir === undefined) throw new UsageError('serve needs --state-dir DIR or --config FILE', SERVE_USAGE);
  const adminListen = parseAdminListen(text(values, 'admin-listen', SERVE_USAGE), env);
  const tls = parseTlsFiles(values, env, SERVE_USAGE);
  if (configFile !== undefined && stateDir !== undefined) {
    throw new UsageError(
      '--config cannot be used with --state-dir: an enrolled node serves only the signed config its control plane pushes (configure it there); --config is for a stand-alone node',
      SERVE_USAGE,
    );
  }
  if (replicas !== undefined && replicas > 1 && stateDir === undefined) {
    throw new UsageError(
      `--replicas ${replicas} needs --state-dir: replicas share their rate-limit counters, spool and control link in the state dir; a stand-alone node (--config) runs as one process`,
      SERVE_USAGE,
    );
  }
  return {
    kind: 'serve',
    ...(configFile !== undefined ? { configFile } : {}),
    ...(stateDir !== undefined ? { stateDir } : {}),
    listen: parseListenAddress(text(values, 'listen', SERVE_USAGE) ?? DEFAULT_LISTEN),
    ...(adminListen !== undefined ? { adminListen } : {}),
    ...(tls !== undefined ? { tls } : {}),
    ...(replicas !== undefined ? { replicas } : {}),
  };
}

/** --replicas K: a whole number from 1 to 999, as ZENOVA_NODE_REPLICAS takes it. */
function parseReplicas(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d{1,3}$/.test(value) || Number(value) < 1) {
    throw new UsageError(`--replicas must be a whole number from 1 to 999 (node-edge processes sharing the caller port), ${givenValue(value, NUMBER_SHAPE, 'a number')}`, SERVE_USAGE);
  }
  return Number(value);
}

/**
 * --control-plane as enrollment will take it (parseControlPlaneUrl, which also names a port out of
 * range), so that a URL it cannot use is a bad command line (exit 2) rather than a failed enrollment.
 */
function checkControlPlaneUrl(value: string): void {
  try {
    parseControlPlaneUrl(value);
  } catch (err) {
    if (err instanceof EnrollError) throw new UsageError(err.message, ENROLL_USAGE);
    throw err;
  }
}

function parseEnroll(argv: string[]): CliCommand {
  const values = parseFlags(
    argv,
    {
      'control-plane': { type: 'string' },
      token: { type: 'string' },
      'token-file': { type: 'string' },
      'state-dir': { type: 'string' },
      'ca-file': { type: 'string' },
      reenroll: { type: 'boolean' },
    },
    ENROLL_USAGE,
    '--token-file FILE',
  );
  if (values.help === true) return { kind: 'help', text: ENROLL_USAGE };
  const controlPlaneUrl = text(values, 'control-plane', ENROLL_USAGE);
  const stateDir = text(values, 'state-dir', ENROLL_USAGE);
  const token = text(values, 'token', ENROLL_USAGE);
  const tokenFile = text(values, 'token-file', ENROLL_USAGE);
  const caFile = text(values, 'ca-file', ENROLL_USAGE);
  if (controlPlaneUrl === undefined || stateDir === undefined || (token === undefined && tokenFile === undefined)) {
    // Every missing option in one message, not one per run.
    const missing = [
      ...(controlPlaneUrl === undefined ? ['--control-plane URL'] : []),
      ...(token === undefined && tokenFile === undefined ? ['--token TOKEN or --token-file FILE'] : []),
      ...(stateDir === undefined ? ['--state-dir DIR'] : []),
    ];
    throw new UsageError(`enroll needs ${missing.join(', and ')}`, ENROLL_USAGE);
  }
  if (!/^https:\/\//i.test(controlPlaneUrl)) {
    throw new UsageError(`--control-plane must be an https:// URL (enrollment sends a secret token over it), ${givenControlPlaneUrl(controlPlaneUrl)}`, ENROLL_USAGE);
  }
  checkControlPlaneUrl(controlPlaneUrl);
  if (token !== undefined && tokenFile !== undefined) throw new UsageError('--token and --token-file cannot be used together; pass one', ENROLL_USAGE);
  return {
    kind: 'enroll',
    controlPlaneUrl,
    token: token !== undefined ? { from: 'argument', value: token } : { from: 'file', file: tokenFile ?? '' },
    stateDir,
    ...(caFile !== undefined ? { caFile } : {}),
    reenroll: values.reenroll === true,
  };
}

function parseStatus(argv: string[]): CliCommand {
  const values = parseFlags(argv, { 'state-dir': { type: 'string' }, json: { type: 'boolean' } }, STATUS_USAGE, '--state-dir DIR');
  if (values.help === true) return { kind: 'help', text: STATUS_USAGE };
  const stateDir = text(values, 'state-dir', STATUS_USAGE);
  if (stateDir === undefined) throw new UsageError('status needs --state-dir DIR', STATUS_USAGE);
  return { kind: 'status', stateDir, json: values.json === true };
}

function parseDoctor(argv: string[], env: NodeJS.ProcessEnv): CliCommand {
  const values = parseFlags(argv, { 'state-dir': { type: 'string' }, 'tls-cert': { type: 'string' }, 'tls-key': { type: 'string' } }, DOCTOR_USAGE, '--state-dir DIR');
  if (values.help === true) return { kind: 'help', text: DOCTOR_USAGE };
  const stateDir = text(values, 'state-dir', DOCTOR_USAGE);
  if (stateDir === undefined) throw new UsageError('doctor needs --state-dir DIR', DOCTOR_USAGE);
  const tls = parseTlsFiles(values, env, DOCTOR_USAGE);
  return { kind: 'doctor', stateDir, ...(tls !== undefined ? { tls } : {}) };
}
