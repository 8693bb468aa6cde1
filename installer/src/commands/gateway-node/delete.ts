// `zenova gateway-node delete NAME --yes`: DELETE /api/v1/nodes/:name. No prompt; --yes is the consent.
import { flagOption, nodeNameArgument, parseOptions, NODE_NAME_NOT_SHOWN, looksLikeNodeName, stringOption, wantsHelp } from '../../args.js';
import type { OptionSpec } from '../../args.js';
import { EXIT_OK, UsageError } from '../../cli-context.js';
import type { CliContext, Command } from '../../cli-context.js';
import { withAdminClient } from '../../connection/admin-session.js';
import { deletedNodeSchema } from './api-schemas.js';
import { COMMON_OPTIONS, COMMON_USAGE, JSON_OPTION, JSON_USAGE, NAME_OPTION, NAME_USAGE } from './common-options.js';
import { nodePath } from './node-path.js';

const HELP = 'gateway-node delete';
const OPTIONS = { yes: { type: 'boolean' }, ...NAME_OPTION, ...JSON_OPTION, ...COMMON_OPTIONS } as const satisfies OptionSpec;

const USAGE = `Usage: zenova gateway-node delete NAME --yes [--json]

Deletes gateway node NAME: its credentials are revoked, its unused install/re-enroll/upgrade
commands stop working and its live connection is closed, on every control-plane replica; it
cannot reconnect. There is no undo: the name becomes free for a new node, installed afresh.
The central node office-primary, installed with the control plane, cannot be deleted once it
has enrolled.

Options:
${NAME_USAGE}
  --yes                 Confirm the deletion (required; the command asks no question)
${JSON_USAGE}
${COMMON_USAGE}
`;

async function run(argv: readonly string[], ctx: CliContext): Promise<number> {
  if (wantsHelp(argv)) {
    ctx.stdout.write(USAGE);
    return EXIT_OK;
  }
  const parsed = parseOptions(argv, OPTIONS, HELP);
  const name = nodeNameArgument(parsed, HELP);
  if (!flagOption(parsed, 'yes')) {
    // A word not shaped like a node name (a token pasted as NAME?) is not echoed.
    throw new UsageError(
      `deleting node ${looksLikeNodeName(name) ? name : NODE_NAME_NOT_SHOWN} revokes its credentials and cuts its connection for good; add --yes to confirm`,
      HELP,
    );
  }
  return withAdminClient(ctx, stringOption(parsed, 'env-file'), HELP, async (client) => {
    const { data, raw } = await client.call('DELETE', nodePath(name), deletedNodeSchema);
    ctx.stdout.write(flagOption(parsed, 'json')
      ? `${JSON.stringify(raw, null, 2)}\n`
      : `Deleted gateway node ${data.deleted}: its credentials are revoked and its live connection closed.\n`);
    return EXIT_OK;
  });
}

export const deleteCommand: Command = { name: 'delete', summary: 'Delete a node (revokes its credentials; needs --yes)', usage: USAGE, run };
