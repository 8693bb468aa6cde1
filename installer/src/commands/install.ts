/**
 * `zenova install node`: host checks first (nothing written while any blocks), then the install
 * (install-node.ts). Exit codes: 0 installed / checks passed, 1 a blocking finding or a failed
 * install (rolled back), 2 bad usage.
 */
import { readFile, readlink, stat } from 'node:fs/promises';
import path from 'node:path';
import { flagOption, noPositionals, nonEmptyOption, parseOptions, requiredOption, stringOption, wantsHelp } from '../args.js';
import { CommandFailure, EXIT_FAILURE, EXIT_OK, UsageError } from '../cli-context.js';
import type { CliContext, Command } from '../cli-context.js';
import { realHostEnv } from '../host/host-env.js';
import type { HostEnv } from '../host/host-env.js';
import type { ServiceState } from '../host/service-manager.js';
import { UNVERIFIED_LOCK_ADVICE, finding } from '../install/diagnostics.js';
import type { Finding } from '../install/diagnostics.js';
import { removeStaleEnvFileTemps } from '../install/env-file.js';
import { readInstalledListen, runHostChecks, unusableListen } from '../install/host-checks.js';
import type { CheckMode } from '../install/host-checks.js';
import type { CaFile } from '../install/control-plane-probe.js';
import { DEFAULT_INSTALL_DIR } from '../install/install-dir-rules.js';
import { CLI_LINK, DEFAULT_NODE_LISTEN, NODE_UNIT, UPDATER_UNIT, installDirFromUnit, installLayout, onHost } from '../install/install-layout.js';
import { installLockHolder, takeInstallLock } from '../install/install-lock.js';
import type { LockAttempt } from '../install/install-lock.js';
import { installNode } from '../install/install-node.js';
import { upgradeNode } from '../install/upgrade-node.js';
import { formatListen, parseListen } from '../install/listen-address.js';
import type { ListenAddress } from '../install/listen-address.js';
import { shellQuote } from '../format/shell-quote.js';
import { unknownCommandMessage } from '../../../proto/src/cli-usage-errors.js';
import { CallerTlsError, expiryWarning, readCallerTls } from '../../../edge-node/src/tls/caller-tls.js';
import { STDIN_TOKEN_FILE, TokenFileError, readTokenFile, readTokenStdin, tokenFileNotPrivate, tokenShapeProblem } from '../../../edge-node/src/enroll/token-file.js';
import type { TokenFile } from '../../../edge-node/src/enroll/token-file.js';
import { IDENTITY_FILE, nodeIdentitySchema } from '../../../edge-node/src/state/identity.js';
import type { CallerTlsFiles, CallerTlsPair } from '../../../edge-node/src/tls/caller-tls.js';

const HELP = 'install node';

export const INSTALL_USAGE = `Usage: zenova install node --package FILE --control-plane URL [--ca-file F] [--install-dir D]
                          --check-only [--reenroll | --upgrade]
       zenova install node --package FILE --control-plane URL (--token T | --token-file F)
                          [--ca-file F] [--install-dir D] [--listen HOST:PORT]
                          [--tls-cert FILE --tls-key FILE] [--reenroll | --upgrade]

Installs a gateway node on this host (run as root). Every host check runs first; if any blocks,
the findings are listed with their NODE-… codes and nothing is written.

  --package FILE        The node package (zenova-node.zpkg) of the control plane's release
  --control-plane URL   The control plane's callback URL (https://…)
  --token T             The one-time token from the install (reenroll, upgrade) command
  --token-file F        Read the token from F instead, its one non-blank line (keeps it out of the
                        process list; chmod 600). F = - reads it from standard input, keeping
                        it off the disk too: printf '%s\\n' TOKEN | sudo ./zenova install node …
  --ca-file F           The control plane's CA (PEM), when it uses a private CA
  --install-dir D       Where to install (default ${DEFAULT_INSTALL_DIR}; seed 004 §9.2 rules)
  --listen HOST:PORT    Where node-edge serves callers (default ${DEFAULT_NODE_LISTEN}); --reenroll of an
                        installed node keeps its installed address
  --tls-cert FILE       Serve callers over HTTPS with this PEM certificate (the node address's
                        certificate first, then its intermediates); checked, then copied to
                        <dir>/etc/tls-cert.pem. Without it callers are served plain HTTP
  --tls-key FILE        The certificate's unencrypted PEM key (both or neither); copied to
                        <dir>/etc/tls-key.pem (0600). --reenroll keeps the installed pair
  --check-only          Run the checks only: no token needed or used, nothing written (not even
                        the install lock: another run is neither refused by it nor refuses it).
                        Give the same --ca-file as the install: a control plane with a private
                        CA is otherwise NODE-CP-TLS; and the same --install-dir: without it the
                        default dir is checked. With --upgrade or --reenroll, that run's
                        checks (a dry run: e.g. is a node installed, is the package newer)
  --reenroll            Replace the installed node's identity (keeps data, spool, unsent records);
                        also recovers a failed install whose data/ was kept (installs it again)
  --upgrade             Upgrade the installed node to this package's release (the control plane's
                        version), with the token of an upgrade command: the release is unpacked beside
                        the installed one, switched in, and switched back if node-edge is not ready
                        (config loaded, control link up) within 60 s. Keeps the identity, data,
                        spool, unsent records, etc/ and the listen address; never with --install-dir,
                        --listen or --tls-cert/--tls-key. Without --ca-file the installed CA is used

On success the CLI is linked as /usr/local/bin/zenova, so "sudo zenova status" works.
`;

const OPTIONS = {
  package: { type: 'string' },
  'control-plane': { type: 'string' },
  token: { type: 'string' },
  'token-file': { type: 'string' },
  'ca-file': { type: 'string' },
  'install-dir': { type: 'string' },
  listen: { type: 'string' },
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  'check-only': { type: 'boolean' },
  reenroll: { type: 'boolean' },
  upgrade: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

type TokenSource = { from: 'argument'; value: string } | { from: 'file'; file: string } | { from: 'stdin' } | undefined;

/** Reads `--token-file -` from the command's standard input. */
async function tokenFromStdin(ctx: CliContext): Promise<string> {
  if (ctx.stdin === undefined) throw new UsageError('--token-file - reads the token from standard input, which this run does not have', HELP);
  // A terminal waits for the operator: say what for (on stderr, so stdout stays the run's report).
  if (ctx.stdin.isTTY === true) ctx.stderr.write('zenova: paste the token from the install command, then press Enter and Ctrl-D\n');
  let token: string;
  try {
    token = await readTokenStdin(ctx.stdin);
  } catch (err) {
    if (err instanceof TokenFileError) throw new UsageError(err.message, HELP);
    throw err;
  }
  checkToken(token, 'the token on standard input (--token-file -)');
  return token;
}

/** Reads --token-file (edge-node/src/enroll/token-file.ts); warns (NODE-TOKEN-FILE-MODE) when others may read it. */
async function tokenFromFile(file: string): Promise<{ token: string; warning?: Finding }> {
  let read: TokenFile;
  try {
    read = await readTokenFile(file);
  } catch (err) {
    if (err instanceof TokenFileError) throw new UsageError(err.message, HELP);
    throw err;
  }
  const { token } = read;
  checkToken(token, `the token in --token-file ${file}`);
  const warning = read.notPrivate ? finding('NODE-TOKEN-FILE-MODE', tokenFileNotPrivate(file, read.mode)) : undefined;
  return warning === undefined ? { token } : { token, warning };
}

/**
 * A token that cannot be one (an unset shell variable gives '') is a usage error before any check
 * or write; the control plane would only refuse it after the installation was written.
 */
function checkToken(token: string, what: string): void {
  const problem = tokenShapeProblem(token, what);
  if (problem !== undefined) throw new UsageError(problem, HELP);
}

function printFinding(ctx: CliContext, f: Finding, indent: string): void {
  ctx.stdout.write(`${indent}${f.blocking ? '✗' : '!'} ${f.code}: ${f.cause}\n${indent}    → ${f.advice}\n`);
}

/** Prints each write step as it ends: ✓ with its label, or the finding. */
function stepPrinter(ctx: CliContext): (label: string, failure?: Finding) => void {
  return (label, failure) => {
    if (failure === undefined) ctx.stdout.write(`  ✓ ${label}\n`);
    else printFinding(ctx, failure, '  ');
  };
}

export async function runInstall(argv: readonly string[], ctx: CliContext, host: HostEnv): Promise<number> {
  const [what, ...rest] = argv;
  if (what === undefined) throw new UsageError('no install target given (the one there is: zenova install node …)', HELP);
  if (what === '--help' || what === '-h' || wantsHelp(argv)) {
    ctx.stdout.write(INSTALL_USAGE);
    return EXIT_OK;
  }
  if (what !== 'node') {
    // `zenova install --package …`: the target was left out, the options are fine.
    if (what.startsWith('-')) throw new UsageError('no install target given before the options (the one there is: zenova install node …)', HELP);
    throw new UsageError(unknownCommandMessage(what, ['node'], [], { noun: 'install target', choices: ['node'] }), HELP);
  }
  const parsed = parseOptions(rest, OPTIONS, HELP);
  // Never quoted: a token pasted without --token would be echoed to the terminal and its logs.
  noPositionals(parsed, HELP, { example: '--token-file FILE' });
  const checkOnly = flagOption(parsed, 'check-only');
  const reenroll = flagOption(parsed, 'reenroll');
  const upgrade = flagOption(parsed, 'upgrade');
  if (reenroll && upgrade) throw new UsageError('--reenroll and --upgrade exclude each other', HELP);
  const installDir = nonEmptyOption(parsed, 'install-dir', HELP, `pass the install dir, or leave --install-dir out for the default ${DEFAULT_INSTALL_DIR}`);
  if (upgrade && installDir !== undefined) {
    throw new UsageError('--install-dir cannot be used with --upgrade: an upgrade keeps the install dir of the first install', HELP);
  }
  const tokenArg = stringOption(parsed, 'token');
  const tokenFile = nonEmptyOption(parsed, 'token-file', HELP, 'pass the file that holds the token');
  if (tokenArg !== undefined && tokenFile !== undefined) throw new UsageError('--token and --token-file exclude each other: give one of them', HELP);
  const tokenSource: TokenSource =
    tokenArg !== undefined ? { from: 'argument', value: tokenArg }
    : tokenFile === STDIN_TOKEN_FILE ? { from: 'stdin' }
    : tokenFile !== undefined ? { from: 'file', file: path.resolve(ctx.cwd, tokenFile) }
    : undefined;
  // Every missing option in one message, not one per run.
  const missing = [
    ...(['package', 'control-plane'] as const).filter((name) => (stringOption(parsed, name) ?? '').trim() === '').map((name) => `--${name}`),
    ...(!checkOnly && tokenSource === undefined ? ['--token or --token-file (or --check-only, which needs no token)'] : []),
  ];
  if (missing.length > 0) throw new UsageError(`${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} required`, HELP);
  const packageFile = path.resolve(ctx.cwd, requiredOption(parsed, 'package', HELP));
  const controlPlaneUrl = requiredOption(parsed, 'control-plane', HELP);
  // URL parsing drops tabs and line breaks silently; written to etc/node.env as given, one would start a line of its own.
  if ([...controlPlaneUrl].some((char) => char.charCodeAt(0) < 0x20 || char.charCodeAt(0) === 0x7f)) throw new UsageError('--control-plane contains a control character (a tab or a line break): copy the URL again from the install command', HELP);
  const caOption = nonEmptyOption(parsed, 'ca-file', HELP, "pass the control plane's CA file, or leave --ca-file out to trust the system store");
  const caFile = caOption === undefined ? undefined : { path: path.resolve(ctx.cwd, caOption), installed: false };
  const listenOption = nonEmptyOption(parsed, 'listen', HELP, 'pass HOST:PORT, or leave --listen out for the default');
  const tlsFiles = tlsOption(stringOption(parsed, 'tls-cert'), stringOption(parsed, 'tls-key'), ctx.cwd);
  if (upgrade && listenOption !== undefined) throw new UsageError('--listen cannot be used with --upgrade: an upgrade keeps the installed listen address (ZENOVA_NODE_LISTEN in <dir>/etc/node.env)', HELP);
  if (upgrade && tlsFiles !== undefined) throw new UsageError('--tls-cert and --tls-key cannot be used with --upgrade: an upgrade keeps the installed etc/ and its TLS pair; leave them out', HELP);

  let token: string | undefined;
  let tokenWarning: Finding | undefined;
  if (!checkOnly && tokenSource !== undefined) {
    if (tokenSource.from === 'argument') {
      token = tokenSource.value.trim();
      checkToken(token, '--token');
    } else if (tokenSource.from === 'stdin') {
      token = await tokenFromStdin(ctx);
    } else {
      const read = await tokenFromFile(tokenSource.file);
      token = read.token;
      tokenWarning = read.warning;
    }
  }
  const listen = await listenAddress(listenOption, reenroll, host);
  if (reenroll && tlsFiles !== undefined) await refuseTlsOnReenroll(host);

  const run: InstallRun = { ctx, host, checkOnly, reenroll, upgrade, installDir, packageFile, controlPlaneUrl, caFile, listen, listenGiven: listenOption !== undefined, tlsFiles, token, tokenWarning, tokenSource };
  // A check-only run writes nothing, so it takes no lock: holding one, it would show in `zenova
  // status` as an upgrade in progress and make a real run meanwhile refused as concurrent. What it
  // reads (units, etc/node.env, data/ state files, links) is written atomically, a temp file renamed
  // or a link swapped, so a run writing meanwhile shows it no half-written file.
  if (checkOnly) return checkAndInstall(run);

  // One install at a time: a second run fails fast instead of writing over the first one. Without
  // root the lock cannot be written, and then the root check blocks before any write anyway.
  const locked = await takeInstallLock(host.hostRoot);
  if (!locked.ok && (locked.busy || host.probe.isRoot())) {
    const f = locked.busy ? lockBusyFinding(locked) : finding('NODE-WRITE-FAILED', `cannot create the install lock ${locked.file} (${locked.reason})`);
    ctx.stdout.write(`zenova install node: ${f.code === 'NODE-INSTALL-RUNNING' ? 'another install is running' : 'cannot take the install lock'}; nothing was checked or written:\n`);
    printFinding(ctx, f, '  ');
    return EXIT_FAILURE;
  }
  try {
    return await checkAndInstall(run);
  } finally {
    if (locked.ok) await locked.lock.release();
  }
}

/** NODE-INSTALL-RUNNING: a live holder, or one this pid namespace cannot judge (install-lock.ts), with how to remove its lock. */
function lockBusyFinding(locked: Extract<LockAttempt, { busy: true }>): Finding {
  const pid = locked.holderPid === undefined ? '' : ` (pid ${locked.holderPid})`;
  if (locked.unverified === undefined) return finding('NODE-INSTALL-RUNNING', `another zenova install node${pid} is running on this host and holds ${locked.file}`);
  const since = locked.unverified.since === undefined ? '' : `, taken at ${locked.unverified.since.toISOString()}`;
  return finding(
    'NODE-INSTALL-RUNNING',
    `${locked.file} is held by a zenova install node${pid} of another pid namespace (a container since restarted, or another container or the host sharing ${path.posix.dirname(locked.file)})${since}; ` +
      'it left no socket that answers either way, so whether it still runs cannot be told from here',
    UNVERIFIED_LOCK_ADVICE(locked.file),
  );
}

/**
 * Where node-edge listens: --listen or the default for a new install. --reenroll of an installed
 * node keeps its installed address (it only replaces the identity and never rewrites etc/node.env),
 * so another --listen there is refused rather than ignored; without a unit (a failed install's
 * data/ kept) the whole install runs again and --listen applies.
 */
async function listenAddress(listenOption: string | undefined, reenroll: boolean, host: HostEnv): Promise<ListenAddress> {
  const listenText = listenOption ?? DEFAULT_NODE_LISTEN;
  if (reenroll) {
    const unit = await host.services.readUnit(NODE_UNIT);
    const dir = unit === undefined ? undefined : installDirFromUnit(unit);
    if (dir !== undefined) {
      const { envFile, text: installed, listen: kept } = await readInstalledListen(host.hostRoot, dir);
      // The env file's fault, not the command line's (edited by hand, or an IPv6 address an earlier
      // installer wrote without brackets): no usage error about a --listen the operator never gave.
      if (installed !== undefined && kept === undefined) {
        throw new CommandFailure(`${unusableListen(installed, envFile)} either; correct that line, then run the same command again`);
      }
      if (listenOption !== undefined && !sameListen(listenOption, kept)) {
        throw new UsageError(
          `--listen cannot change the listen address with --reenroll: a reenroll keeps the installed node's address (${installed ?? 'unknown'}, ZENOVA_NODE_LISTEN in ${envFile}); ` +
            'leave out --listen. This release has no command that changes the address of an installed node (no uninstall, and its dir must never be deleted to reinstall).',
          HELP,
        );
      }
      if (kept !== undefined) return kept;
    }
  }
  const listen = parseListen(listenText);
  if (listen === undefined) throw new UsageError(`--listen must be HOST:PORT with a port from 1 to 65535, got ${JSON.stringify(listenText)}`, HELP);
  return listen;
}

/** --tls-cert and --tls-key, both or neither, as absolute paths. */
function tlsOption(certFile: string | undefined, keyFile: string | undefined, cwd: string): CallerTlsFiles | undefined {
  if (certFile === undefined && keyFile === undefined) return undefined;
  if (certFile === undefined || keyFile === undefined) {
    throw new UsageError(`${certFile === undefined ? '--tls-key needs --tls-cert FILE' : '--tls-cert needs --tls-key FILE'} too: give both the certificate and its key, or neither for plain HTTP`, HELP);
  }
  return { certFile: path.resolve(cwd, certFile), keyFile: path.resolve(cwd, keyFile) };
}

/**
 * --reenroll of an installed node keeps its etc/ (and so its TLS pair): new files there would be
 * ignored, so they are refused. Without a unit (a failed install's data/ kept) the whole install
 * runs again and they apply.
 */
async function refuseTlsOnReenroll(host: HostEnv): Promise<void> {
  const unit = await host.services.readUnit(NODE_UNIT);
  const dir = unit === undefined ? undefined : installDirFromUnit(unit);
  if (dir === undefined) return;
  const layout = installLayout(dir);
  throw new UsageError(
    `--tls-cert and --tls-key cannot be used with --reenroll: a reenroll keeps the installed node's etc/ and its TLS pair; leave them out. ` +
      `To renew the certificate, replace ${layout.tlsCertFile} and ${layout.tlsKeyFile} (key 0600) and run \`systemctl reload ${NODE_UNIT}\``,
    HELP,
  );
}

/** The caller port's pair, read and checked before anything is written (the same check serve makes at start). */
function checkTlsPair(files: CallerTlsFiles): { ok: true; label: string; pair: CallerTlsPair } | { ok: false; finding: Finding } {
  try {
    const pair = readCallerTls(files);
    const warning = expiryWarning(pair, files.certFile);
    return { ok: true, pair, label: `caller TLS certificate ${files.certFile} and its key ${files.keyFile} (valid until ${pair.notAfter.toISOString()}, ${pair.daysLeft} days left${warning !== undefined ? ': renew it soon' : ''})` };
  } catch (err) {
    if (!(err instanceof CallerTlsError)) throw err;
    return { ok: false, finding: finding('NODE-TLS-PAIR', err.message) };
  }
}

function sameListen(a: string, y: ListenAddress | undefined): boolean {
  const x = parseListen(a);
  return x !== undefined && y !== undefined && x.host === y.host && x.port === y.port;
}

interface InstallRun {
  ctx: CliContext;
  host: HostEnv;
  checkOnly: boolean;
  reenroll: boolean;
  upgrade: boolean;
  installDir: string | undefined;
  packageFile: string;
  controlPlaneUrl: string;
  caFile: CaFile | undefined;
  listen: ListenAddress;
  /** --listen was given (not the default, nor the installed address a --reenroll keeps). */
  listenGiven: boolean;
  tlsFiles: CallerTlsFiles | undefined;
  token: string | undefined;
  tokenWarning: Finding | undefined;
  tokenSource: TokenSource;
}

/** The checks, then (unless --check-only) the install; a run that installs holds the install lock throughout. */
async function checkAndInstall(run: InstallRun): Promise<number> {
  const { ctx, host, checkOnly, reenroll, upgrade, installDir, packageFile, controlPlaneUrl, listen, tlsFiles, token, tokenWarning, tokenSource } = run;
  ctx.stdout.write(`zenova install node${checkOnly ? ' --check-only' : ''}${reenroll ? ' --reenroll' : upgrade ? ' --upgrade' : ''}: checking this host (nothing is written until every check passes)\n`);
  if (tokenWarning !== undefined) printFinding(ctx, tokenWarning, '  ');
  // A check-only run holds no lock (runInstall): a run that does may change what it finds.
  const otherRun = checkOnly ? await installLockHolder(host.hostRoot) : undefined;
  if (otherRun !== undefined) ctx.stdout.write(`  note: another zenova install node (pid ${otherRun}) is running on this host; these checks see the host as that run has left it so far\n`);
  // --check-only with --reenroll or --upgrade runs that command's checks (a dry run).
  const mode: CheckMode = reenroll ? 'reenroll' : upgrade ? 'upgrade' : checkOnly ? 'check-only' : 'install';
  // An upgrade trusts the control plane the way the installed node does, unless told otherwise.
  const caFile = run.caFile ?? (upgrade ? await installedCaFile(host) : undefined);
  const key = await readTrustedKey(host);

  const checks = await runHostChecks(
    {
      mode,
      hostRoot: host.hostRoot,
      installDir,
      defaultInstallDir: DEFAULT_INSTALL_DIR,
      packageFile,
      ...key,
      controlPlaneUrl,
      caFile,
      listen,
      probe: host.probe,
      services: host.services,
      probeControlPlane: host.probeControlPlane,
      ...(host.probeGateway !== undefined ? { probeGateway: host.probeGateway } : {}),
    },
    (label, findings) => {
      if (findings.length === 0) ctx.stdout.write(`  ✓ ${label}\n`);
      for (const f of findings) printFinding(ctx, f, '  ');
    },
  );
  const tls = tlsFiles !== undefined ? checkTlsPair(tlsFiles) : undefined;
  if (tls !== undefined) {
    if (tls.ok) ctx.stdout.write(`  ✓ ${tls.label}\n`);
    else printFinding(ctx, tls.finding, '  ');
  }
  const blocking = [...checks.findings, ...(tls !== undefined && !tls.ok ? [tls.finding] : [])].filter((f) => f.blocking);
  if (blocking.length > 0) {
    const installed = blocking.find((f) => f.code === 'NODE-INSTALLED');
    ctx.stdout.write(`\n${installed !== undefined ? 'A gateway node is already installed on this host. ' : ''}${blocking.length} blocking finding${blocking.length === 1 ? '' : 's'}; nothing was written:\n`);
    for (const f of blocking) printFinding(ctx, f, '  ');
    return EXIT_FAILURE;
  }
  if (checkOnly) {
    const next = upgrade ? 'the upgrade command from the console (without --check-only)' : reenroll ? 'the reenroll command from the console (without --check-only)' : 'the install command from the console';
    ctx.stdout.write(`\nAll checks passed; nothing was written and no token was used. Run ${next} next.\n`);
    return EXIT_OK;
  }
  if (checks.manifest === undefined || checks.dataOffset === undefined || token === undefined) throw new Error('checks passed without a verified package or token');
  await removeEnvFileLeftovers(ctx, host, checks.installed?.installDir ?? checks.installDir);
  if (upgrade) {
    if (checks.installed === undefined) throw new Error('upgrade checks passed without an installed node');
    return upgradeInstalled(ctx, host, { installed: checks.installed, packageFile, manifest: checks.manifest, dataOffset: checks.dataOffset, controlPlaneUrl, caPem: checks.caPem, caFile, token, tokenSource, controlPlaneVersion: checks.controlPlane?.version });
  }

  ctx.stdout.write(
    reenroll && checks.keptData
      ? `\nRe-enrolling the node in ${checks.installDir}: its data/ was kept by an earlier install that failed, so the release, etc/ and the units are installed again and data/ is kept:\n`
      : `\n${reenroll ? 'Re-enrolling' : 'Installing'} the node in ${checks.installDir}:\n`,
  );
  const outcome = await installNode(
    {
      mode: reenroll ? (checks.keptData ? 'reenroll-kept-data' : 'reenroll') : 'install',
      hostRoot: host.hostRoot,
      installDir: checks.installDir,
      packageFile,
      manifest: checks.manifest,
      dataOffset: checks.dataOffset,
      controlPlaneUrl,
      caPem: checks.caPem,
      token,
      listen,
      ...(tls?.ok === true ? { tls: { certPem: tls.pair.certPem, keyPem: tls.pair.keyPem } } : {}),
      services: host.services,
      waitReady: host.waitReady,
      ...(host.readyTimeoutMs !== undefined ? { readyTimeoutMs: host.readyTimeoutMs } : {}),
      ...(host.enroll !== undefined ? { enroll: host.enroll } : {}),
      ...(ctx.launcher !== undefined ? { runningCli: ctx.launcher } : {}),
      checkCommand: checkOnlyCommand(run, checks.installDir),
      redeemWhileServing: checks.controlPlane?.redemptionKeys === true,
      ...(await hostMemory(host)),
    },
    stepPrinter(ctx),
  );
  if (!outcome.ok) {
    ctx.stdout.write(`\n${reenroll ? 'Re-enrollment' : 'Install'} failed: ${outcome.finding.code}: ${outcome.finding.cause}\n    → ${outcome.finding.advice}\n`);
    return EXIT_FAILURE;
  }
  ctx.stdout.write(
    `\nNode ${outcome.nodeName} (id ${outcome.nodeId}) is ${reenroll ? 're-enrolled' : 'installed'} and ready.\n` +
      `  Check it:   ${outcome.cli} status\n  Its logs:   ${outcome.cli} logs node-edge --since '30 min ago'\n` +
      (tokenSource?.from === 'file' ? `  Delete the token file now: rm -f -- ${shellQuote(tokenSource.file)}\n` : ''),
  );
  return EXIT_OK;
}

/**
 * This run's command as a --check-only run, for advice to check the host again after a fix: the
 * same package, control plane, CA file, mode, --listen and TLS pair, and the install dir whenever it
 * is not the default (a check-only run without it checks the default dir, not this run's); every
 * value shell-quoted, never the token.
 */
function checkOnlyCommand(run: InstallRun, installDir: string): string {
  const parts = [`sudo ${run.ctx.launcher ?? './zenova'} install node`, `--package ${shellQuote(run.packageFile)}`];
  if (run.reenroll) parts.push('--reenroll');
  parts.push(`--control-plane ${shellQuote(run.controlPlaneUrl)}`);
  // An upgrade trusting the installed CA file by itself was given none.
  if (run.caFile !== undefined && !run.caFile.installed) parts.push(`--ca-file ${shellQuote(run.caFile.path)}`);
  // An upgrade keeps the first install's dir and refuses --install-dir.
  if (!run.upgrade && installDir !== DEFAULT_INSTALL_DIR) parts.push(`--install-dir ${shellQuote(installDir)}`);
  if (run.listenGiven) parts.push(`--listen ${shellQuote(formatListen(run.listen))}`);
  if (run.tlsFiles !== undefined) parts.push(`--tls-cert ${shellQuote(run.tlsFiles.certFile)} --tls-key ${shellQuote(run.tlsFiles.keyFile)}`);
  if (run.upgrade) parts.push('--upgrade');
  parts.push('--check-only');
  return parts.join(' ');
}

/**
 * The temp files of etc/node.env a run killed mid-write left (they may hold the env file's lines,
 * an operator's secrets among them). Only a run holding the install lock gets here, so no other
 * installer run is writing one now; while the updater unit runs (it may write the install dir) they
 * are left for a later run.
 */
async function removeEnvFileLeftovers(ctx: CliContext, host: HostEnv, installDir: string): Promise<void> {
  const updater = await host.services.state(UPDATER_UNIT).catch((): ServiceState => 'unknown');
  if (updater === 'active' || updater === 'activating' || updater === 'deactivating') return;
  const etc = installLayout(installDir).etc;
  const { removed, failed } = await removeStaleEnvFileTemps(onHost(host.hostRoot, etc));
  if (removed.length > 0) ctx.stdout.write(`  ✓ removed ${removed.length === 1 ? 'a temp file' : `${removed.length} temp files`} of ${etc}/node.env an interrupted run left: ${removed.join(', ')}\n`);
  for (const { name, reason } of failed) {
    ctx.stdout.write(`  note: could not remove ${etc}/${name}, a temp file of node.env an interrupted run left (${reason}); remove it by hand: rm -f -- ${shellQuote(`${etc}/${name}`)}\n`);
  }
}

/**
 * The installed node's CA file for the control plane (physical path), when it has one and its
 * identity holds a CA too: a node an earlier installer re-enrolled without --ca-file kept a stale
 * file while its identity went over to this host's system trust store, which is then used.
 */
async function installedCaFile(host: HostEnv): Promise<CaFile | undefined> {
  const unit = await host.services.readUnit(NODE_UNIT);
  const dir = unit === undefined ? undefined : installDirFromUnit(unit);
  if (dir === undefined) return undefined;
  const layout = installLayout(dir);
  const file = onHost(host.hostRoot, layout.caFile);
  if (!(await stat(file).then((s) => s.isFile(), () => false))) return undefined;
  try {
    const identity = nodeIdentitySchema.safeParse(JSON.parse(await readFile(onHost(host.hostRoot, path.posix.join(layout.data, IDENTITY_FILE)), 'utf8')));
    if (identity.success && identity.data.controlPlaneCaPem === undefined) return undefined;
  } catch {
    // An unreadable identity is the host checks' finding (NODE-UPGRADE-NONE); the file stands till then.
  }
  return { path: file, installed: true };
}

/** The write phase of --upgrade (upgrade-node.ts) and its summary. */
async function upgradeInstalled(
  ctx: CliContext,
  host: HostEnv,
  input: Omit<Parameters<typeof upgradeNode>[0], 'hostRoot' | 'services' | 'waitReady' | 'token'> & { token: string; tokenSource: TokenSource; controlPlaneVersion: string | undefined },
): Promise<number> {
  const { tokenSource, controlPlaneVersion, ...rest } = input;
  ctx.stdout.write(`\nUpgrading node ${input.installed.nodeName} in ${input.installed.installDir} from ${input.installed.version} to ${input.manifest.version}:\n`);
  const outcome = await upgradeNode(
    {
      ...rest,
      hostRoot: host.hostRoot,
      services: host.services,
      waitReady: host.waitReady,
      ...(host.readyTimeoutMs !== undefined ? { readyTimeoutMs: host.readyTimeoutMs } : {}),
      ...(host.redeemUpgrade !== undefined ? { redeem: host.redeemUpgrade } : {}),
      ...(await hostMemory(host)),
    },
    stepPrinter(ctx),
  );
  if (!outcome.ok) {
    ctx.stdout.write(`\nUpgrade failed: ${outcome.finding.code}: ${outcome.finding.cause}\n    → ${outcome.finding.advice}\n`);
    return EXIT_FAILURE;
  }
  // `zenova` where the install linked it onto PATH (the link follows `current`), else the full path.
  const layout = installLayout(input.installed.installDir);
  const cli = (await readlink(onHost(host.hostRoot, CLI_LINK)).catch(() => undefined)) === layout.cli ? 'zenova' : layout.cli;
  ctx.stdout.write(
    `\nNode ${outcome.nodeName} (id ${outcome.nodeId}) is upgraded from ${outcome.from} to ${outcome.to} and ready.\n` +
      `  Check it:   ${cli} status (then make one real call through the node)\n  Its logs:   ${cli} logs node-edge --since '30 min ago'\n` +
      // A finished interrupted upgrade may end on a version the control plane has moved on from.
      (controlPlaneVersion !== undefined && controlPlaneVersion !== outcome.to
        ? `  Next:       the control plane runs ${controlPlaneVersion}: issue a new upgrade command (\`zenova gateway-node upgrade-command ${outcome.nodeName}\`) and run it with the ${controlPlaneVersion} package\n`
        : '') +
      (tokenSource?.from === 'file' ? `  Delete the token file now: rm -f -- ${shellQuote(tokenSource.file)}\n` : ''),
  );
  return EXIT_OK;
}

/** The host's memory for the replicas' warning (the count is known only after the token is used); none when it cannot be read. */
async function hostMemory(host: HostEnv): Promise<{ memoryBytes?: number }> {
  const memoryBytes = await host.probe.memoryBytes().catch(() => undefined);
  return memoryBytes === undefined ? {} : { memoryBytes };
}

/** The release key's text; a key file that exists but cannot be read is a finding of the checks. */
async function readTrustedKey(host: HostEnv): Promise<{ trustedKeyPem: string | undefined; trustedKeyUnreadable?: string }> {
  try {
    return { trustedKeyPem: await host.trustedKeyPem() };
  } catch (err) {
    return { trustedKeyPem: undefined, trustedKeyUnreadable: (err as NodeJS.ErrnoException).code ?? (err as Error).message };
  }
}

export function installCommandFor(host: () => HostEnv): Command {
  return { name: 'install', summary: 'Install a gateway node on this host', usage: INSTALL_USAGE, run: (argv, ctx) => runInstall(argv, ctx, host()) };
}

export const installCommand: Command = installCommandFor(realHostEnv);
