/**
 * `zenova gateway-node install-command | reenroll-command | upgrade-command NAME`: issue a new
 * one-time command of that kind (POST /api/v1/nodes/:name/<kind>-command); the control plane
 * invalidates the previous unused token of the same kind.
 */
import { flagOption, nodeNameArgument, parseOptions, stringOption, wantsHelp } from '../../args.js';
import type { OptionSpec } from '../../args.js';
import { EXIT_OK } from '../../cli-context.js';
import type { CliContext, Command } from '../../cli-context.js';
import { withAdminClient } from '../../connection/admin-session.js';
import { checkCertificateOutOption } from '../../local-files.js';
import { nodeViewSchema, oneTimeCommandSchema } from './api-schemas.js';
import type { CommandKind, NodeView } from './api-schemas.js';
import { COMMON_OPTIONS, COMMON_USAGE, JSON_OPTION, JSON_USAGE, NAME_OPTION, NAME_USAGE } from './common-options.js';
import { nodePath } from './node-path.js';
import { SHOWN_ONCE_WARNING, caFileInCommand, printOneTimeCommand, saveCaBesideJson } from './one-time-command-output.js';

const OPTIONS = { 'ca-out': { type: 'string' }, ...NAME_OPTION, ...JSON_OPTION, ...COMMON_OPTIONS } as const satisfies OptionSpec;

const DESCRIPTIONS: Record<CommandKind, string> = {
  install: `Issues a new one-time install command for node NAME, e.g. when the first one expired (after
ZENOVA_INSTALL_TOKEN_TTL_SECONDS, 24 h by default), was lost or was used on a host that failed. The previous unused install command stops working.
For a node a host already enrolled as, it warns on stderr: redeeming the command revokes that host's
credentials (for a host that only lost its identity, use reenroll-command).`,
  reenroll: `Issues a one-time re-enroll command for node NAME: for a node host that lost its identity or
whose credential expired. Redeeming it revokes the node's old credentials.`,
  upgrade: `Issues a one-time upgrade command for node NAME: for a node that was offline or failed while
the control plane upgraded its nodes. It never carries --install-dir (the node keeps its directory).`,
};

function usageFor(kind: CommandKind): string {
  return `Usage: zenova gateway-node ${kind}-command NAME [--ca-out F] [--json]

${DESCRIPTIONS[kind]}
The command is ${SHOWN_ONCE_WARNING}.

Options:
${NAME_USAGE}
  --ca-out F            Write the CA the command's --ca-file refers to into F
                        (never over a file holding anything else: see docs/install.md)
${JSON_USAGE}
${COMMON_USAGE}
`;
}

/**
 * An install command for a node a host already enrolled as: redeeming it anywhere gives that host
 * the node's identity and revokes the enrolled host's credentials. Legitimate (the host died), but
 * for a host that only lost its identity, reenroll-command is the one meant.
 */
export function enrolledNodeWarning(node: NodeView): string | undefined {
  if (node.enrolledAt === null || node.enrolledAt === undefined) return undefined;
  const host = node.hostname ?? 'its host';
  const heartbeat = node.lastHeartbeatAt === null || node.lastHeartbeatAt === undefined ? 'no heartbeat yet' : `last heartbeat ${node.lastHeartbeatAt}`;
  return `warning: node ${node.name} is enrolled (host ${host}, status ${node.status}, ${heartbeat}). Redeeming this install command `
    + `gives the installing host node ${node.name}'s identity and revokes the credentials of ${host}, which then cannot reach the control plane. `
    + `For ${host} itself (identity lost or credential expired) issue reenroll-command instead.\n`;
}

function oneTimeCommand(kind: CommandKind, summary: string): Command {
  const usage = usageFor(kind);
  const help = `gateway-node ${kind}-command`;
  const run = async (argv: readonly string[], ctx: CliContext): Promise<number> => {
    if (wantsHelp(argv)) {
      ctx.stdout.write(usage);
      return EXIT_OK;
    }
    const parsed = parseOptions(argv, OPTIONS, help);
    const name = nodeNameArgument(parsed, help);
    const caOut = stringOption(parsed, 'ca-out');
    checkCertificateOutOption(caOut, '--ca-out', ctx.cwd, help);
    return withAdminClient(ctx, stringOption(parsed, 'env-file'), help, async (client) => {
      if (kind === 'install') {
        const warning = enrolledNodeWarning((await client.call('GET', nodePath(name), nodeViewSchema)).data);
        if (warning !== undefined) ctx.stderr.write(warning);
      }
      // An empty JSON object: the route takes no fields, and fastify refuses an empty JSON body.
      const { data, raw } = await client.call('POST', nodePath(name, `${kind}-command`), oneTimeCommandSchema, {});
      const caPem = data.caPem ?? undefined;
      if (flagOption(parsed, 'json')) {
        ctx.stdout.write(`${JSON.stringify(raw, null, 2)}\n`);
        saveCaBesideJson(ctx, name, caOut, caFileInCommand(data.command) === undefined ? undefined : caPem);
        return EXIT_OK;
      }
      printOneTimeCommand(ctx, { nodeName: name, kind, issued: data, caPem, caSourceFile: undefined, caOut, reissued: true });
      return EXIT_OK;
    });
  };
  return { name: `${kind}-command`, summary, usage, run };
}

export const installCommandCommand = oneTimeCommand('install', 'Issue a new one-time install command');
export const reenrollCommandCommand = oneTimeCommand('reenroll', 'Issue a one-time re-enroll command');
export const upgradeCommandCommand = oneTimeCommand('upgrade', 'Issue a one-time upgrade command');
