/**
 * `zenova install node`: host checks first (nothing written while any blocks), then the install
 * (install-node.ts). Exit codes: 0 installed / checks passed, 1 a blocking finding or a failed
 * install (rolled back), 2 bad usage.
 */
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { flagOption, noPositionals, parseOptions, requiredOption, stringOption, wantsHelp } from '../args.js';
import { CommandFailure, EXIT_FAILURE, EXIT_OK, UsageError } from '../cli-context.js';
import type { CliContext, Command } from '../cli-context.js';
import { realHostEnv } from '../host/host-env.js';
import type { HostEnv } from '../host/host-env.js';
import { finding } from '../install/diagnostics.js';
import type { Finding } from '../install/diagnostics.js';
import { parseListen, readNodeEnv } from '../install/env-file.js';
import { runHostChecks } from '../install/host-checks.js';
import type { CheckMode } from '../install/host-checks.js';
import { DEFAULT_INSTALL_DIR } from '../install/install-dir-rules.js';
import { DEFAULT_NODE_LISTEN, NODE_UNIT, installDirFromUnit, installLayout, onHost } from '../install/install-layout.js';
import { installNode } from '../install/install-node.js';

const HELP = 'install node';
const MAX_TOKEN_FILE_BYTES = 4096;
/** The enrollment's own limit (edge-node/src/enroll/enroll.ts). */
const MAX_TOKEN_CHARS = 512;

export const INSTALL_USAGE = `Usage: zenova install node --package FILE --control-plane URL (--token T | --token-file F)
                          [--ca-file F] [--install-dir D] [--listen HOST:PORT]
                          [--check-only | --reenroll | --upgrade]

Installs a gateway node on this host (run as root). Every host check runs first; if any blocks,
the findings are listed with their NODE-… codes and nothing is written.

  --package FILE        The node package (zenova-node.zpkg) of the control plane's release
  --control-plane URL   The control plane's callback URL (https://…)
  --token T             The one-time token from the install command
  --token-file F        Read the token from F instead (keeps it out of the process list; chmod 600)
  --ca-file F           The control plane's CA (PEM), when it uses a private CA
  --install-dir D       Where to install (default ${DEFAULT_INSTALL_DIR}; seed 004 §9.2 rules)
  --listen HOST:PORT    Where node-edge serves callers (default ${DEFAULT_NODE_LISTEN})
  --check-only          Run the checks only: no token needed or used, nothing written
  --reenroll            Replace the installed node's identity (keeps data, spool, unsent records);
                        also recovers a failed install whose data/ was kept (installs it again)
  --upgrade             Upgrade an installed node (not available in this release; never with --install-dir)

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
  'check-only': { type: 'boolean' },
  reenroll: { type: 'boolean' },
  upgrade: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

type TokenSource = { from: 'argument'; value: string } | { from: 'file'; file: string } | undefined;

/** Reads --token-file: a small regular file; warns (NODE-TOKEN-FILE-MODE) when others may read it. */
async function readTokenFile(file: string): Promise<{ token: string; warning?: Finding }> {
  let text: string;
  let mode: number;
  try {
    const info = await stat(file);
    if (!info.isFile()) throw new UsageError(`--token-file ${file} is not a regular file`, HELP);
    if (info.size > MAX_TOKEN_FILE_BYTES) throw new UsageError(`--token-file ${file} is larger than ${MAX_TOKEN_FILE_BYTES} bytes`, HELP);
    mode = info.mode;
    text = await readFile(file, 'utf8');
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(`cannot read --token-file ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, HELP);
  }
  const token = text.split(/\r?\n/, 1)[0]?.trim() ?? '';
  if (token === '') throw new UsageError(`--token-file ${file} is empty: write the token from the install command into it`, HELP);
  checkToken(token, `the token in --token-file ${file}`);
  const warning = (mode & 0o077) !== 0 ? finding('NODE-TOKEN-FILE-MODE', `the token file ${file} is readable by group or others (mode 0${(mode & 0o777).toString(8)})`) : undefined;
  return warning === undefined ? { token } : { token, warning };
}

/**
 * A token that cannot be one (an unset shell variable gives '') is a usage error before any check
 * or write; the control plane would only refuse it after the installation was written.
 */
function checkToken(token: string, what: string): void {
  if (token === '') throw new UsageError(`${what} is empty (an unset shell variable?): pass the token from the install command`, HELP);
  if (/\s/.test(token)) throw new UsageError(`${what} contains whitespace; tokens never do: copy it again from the install command`, HELP);
  if (token.length > MAX_TOKEN_CHARS) throw new UsageError(`${what} is longer than ${MAX_TOKEN_CHARS} characters: copy it again from the install command`, HELP);
}

function printFinding(ctx: CliContext, f: Finding, indent: string): void {
  ctx.stdout.write(`${indent}${f.blocking ? '✗' : '!'} ${f.code}: ${f.cause}\n${indent}    → ${f.advice}\n`);
}

export async function runInstall(argv: readonly string[], ctx: CliContext, host: HostEnv): Promise<number> {
  const [what, ...rest] = argv;
  if (what === undefined || what === '--help' || what === '-h' || wantsHelp(argv)) {
    ctx.stdout.write(INSTALL_USAGE);
    return what === undefined ? 2 : EXIT_OK;
  }
  if (what !== 'node') throw new UsageError(`unknown install target ${JSON.stringify(what)} (only "node")`, HELP);
  const parsed = parseOptions(rest, OPTIONS, HELP);
  noPositionals(parsed, HELP);
  const checkOnly = flagOption(parsed, 'check-only');
  const reenroll = flagOption(parsed, 'reenroll');
  const upgrade = flagOption(parsed, 'upgrade');
  if ([checkOnly, reenroll, upgrade].filter(Boolean).length > 1) throw new UsageError('--check-only, --reenroll and --upgrade exclude each other', HELP);
  const installDir = stringOption(parsed, 'install-dir');
  if (upgrade && installDir !== undefined) {
    throw new UsageError('--install-dir cannot be used with --upgrade: an upgrade keeps the install dir of the first install', HELP);
  }
  const tokenArg = stringOption(parsed, 'token');
  const tokenFile = stringOption(parsed, 'token-file');
  if (tokenArg !== undefined && tokenFile !== undefined) throw new UsageError('--token and --token-file exclude each other: give one of them', HELP);
  const tokenSource: TokenSource = tokenArg !== undefined ? { from: 'argument', value: tokenArg } : tokenFile !== undefined ? { from: 'file', file: path.resolve(ctx.cwd, tokenFile) } : undefined;
  if (!checkOnly && tokenSource === undefined) throw new UsageError('--token or --token-file is required (or --check-only, which needs no token)', HELP);
  const packageFile = path.resolve(ctx.cwd, requiredOption(parsed, 'package', HELP));
  const controlPlaneUrl = requiredOption(parsed, 'control-plane', HELP);
  const caOption = stringOption(parsed, 'ca-file');
  const caFile = caOption === undefined ? undefined : path.resolve(ctx.cwd, caOption);
  const listenOption = stringOption(parsed, 'listen');
  if (upgrade) {
    throw new CommandFailure('--upgrade is not available in this installer version yet (managed upgrades come with a later release); nothing was changed');
  }

  let token: string | undefined;
  let tokenWarning: Finding | undefined;
  if (!checkOnly && tokenSource !== undefined) {
    if (tokenSource.from === 'argument') {
      token = tokenSource.value.trim();
      checkToken(token, '--token');
    } else {
      const read = await readTokenFile(tokenSource.file);
      token = read.token;
      tokenWarning = read.warning;
    }
  }
  ctx.stdout.write(`zenova install node${checkOnly ? ' --check-only' : reenroll ? ' --reenroll' : ''}: checking this host (nothing is written until every check passes)\n`);
  if (tokenWarning !== undefined) printFinding(ctx, tokenWarning, '  ');

  // --reenroll keeps the installed listen address; a new install takes --listen or the default.
  let listenText = listenOption ?? DEFAULT_NODE_LISTEN;
  const mode: CheckMode = checkOnly ? 'check-only' : reenroll ? 'reenroll' : 'install';
  if (reenroll && listenOption === undefined) {
    const unit = await host.services.readUnit(NODE_UNIT);
    const dir = unit === undefined ? undefined : installDirFromUnit(unit);
    if (dir !== undefined) listenText = (await readNodeEnv(onHost(host.hostRoot, installLayout(dir).envFile))).ZENOVA_NODE_LISTEN ?? listenText;
  }
  const listen = parseListen(listenText);
  if (listen === undefined) throw new UsageError(`--listen must be HOST:PORT with a port from 1 to 65535, got ${JSON.stringify(listenText)}`, HELP);

  const checks = await runHostChecks(
    {
      mode,
      hostRoot: host.hostRoot,
      installDir,
      defaultInstallDir: DEFAULT_INSTALL_DIR,
      packageFile,
      trustedKeyPem: await host.trustedKeyPem(),
      controlPlaneUrl,
      caFile,
      listen,
      probe: host.probe,
      services: host.services,
      probeControlPlane: host.probeControlPlane,
    },
    (label, findings) => {
      if (findings.length === 0) ctx.stdout.write(`  ✓ ${label}\n`);
      for (const f of findings) printFinding(ctx, f, '  ');
    },
  );
  const blocking = checks.findings.filter((f) => f.blocking);
  if (blocking.length > 0) {
    const installed = blocking.find((f) => f.code === 'NODE-INSTALLED');
    ctx.stdout.write(`\n${installed !== undefined ? 'A gateway node is already installed on this host. ' : ''}${blocking.length} blocking finding${blocking.length === 1 ? '' : 's'}; nothing was written:\n`);
    for (const f of blocking) printFinding(ctx, f, '  ');
    return EXIT_FAILURE;
  }
  if (checkOnly) {
    ctx.stdout.write('\nAll checks passed; nothing was written and no token was used. Run the install command from the console next.\n');
    return EXIT_OK;
  }
  if (checks.manifest === undefined || checks.dataOffset === undefined || token === undefined) throw new Error('checks passed without a verified package or token');

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
      services: host.services,
      waitReady: host.waitReady,
      ...(host.readyTimeoutMs !== undefined ? { readyTimeoutMs: host.readyTimeoutMs } : {}),
      ...(host.enroll !== undefined ? { enroll: host.enroll } : {}),
    },
    (label, failure) => {
      if (failure === undefined) ctx.stdout.write(`  ✓ ${label}\n`);
      else printFinding(ctx, failure, '  ');
    },
  );
  if (!outcome.ok) {
    ctx.stdout.write(`\n${reenroll ? 'Re-enrollment' : 'Install'} failed: ${outcome.finding.code}: ${outcome.finding.cause}\n    → ${outcome.finding.advice}\n`);
    return EXIT_FAILURE;
  }
  ctx.stdout.write(
    `\nNode ${outcome.nodeName} (id ${outcome.nodeId}) is ${reenroll ? 're-enrolled' : 'installed'} and ready.\n` +
      `  Check it:   ${outcome.cli} status\n  Its logs:   ${outcome.cli} logs node-edge --since '30 min ago'\n` +
      (tokenSource?.from === 'file' ? `  Delete the token file now: rm -f ${tokenSource.file}\n` : ''),
  );
  return EXIT_OK;
}

export function installCommandFor(host: () => HostEnv): Command {
  return { name: 'install', summary: 'Install a gateway node on this host', usage: INSTALL_USAGE, run: (argv, ctx) => runInstall(argv, ctx, host()) };
}

export const installCommand: Command = installCommandFor(realHostEnv);
