// `zenova gateway-node list`: GET /api/v1/nodes as a table (or --json).
import { flagOption, noPositionals, parseOptions, stringOption, wantsHelp } from '../../args.js';
import type { OptionSpec } from '../../args.js';
import { EXIT_OK, currentTime } from '../../cli-context.js';
import type { CliContext, Command } from '../../cli-context.js';
import { withAdminClient } from '../../connection/admin-session.js';
import { nodeListSchema } from './api-schemas.js';
import { COMMON_OPTIONS, COMMON_USAGE, JSON_OPTION, JSON_USAGE } from './common-options.js';
import { renderNodeTable } from './node-format.js';

const HELP = 'gateway-node list';
const OPTIONS = { ...JSON_OPTION, ...COMMON_OPTIONS } as const satisfies OptionSpec;

const USAGE = `Usage: zenova gateway-node list [--json]

Lists the gateway nodes: NAME, STATUS (pending until the first heartbeat, then online or offline),
VERSION, CONFIG BEHIND (config versions not yet applied), LAST HEARTBEAT, REQ 5M and ERR 5M
(requests and error rate over the last 5 minutes), BACKLOG (records waiting to be sent back) and
SPOOL (local spool in use). Notes under the table name each node whose clock is more than 30 s
off the control plane's and each node with a config error (a config version it did not apply;
\`show NAME\` says why).

Options:
${JSON_USAGE}
${COMMON_USAGE}
`;

async function run(argv: readonly string[], ctx: CliContext): Promise<number> {
  if (wantsHelp(argv)) {
    ctx.stdout.write(USAGE);
    return EXIT_OK;
  }
  const parsed = parseOptions(argv, OPTIONS, HELP);
  noPositionals(parsed, HELP);
  return withAdminClient(ctx, stringOption(parsed, 'env-file'), HELP, async (client) => {
    const { data, raw } = await client.call('GET', 'api/v1/nodes', nodeListSchema);
    if (flagOption(parsed, 'json')) {
      ctx.stdout.write(`${JSON.stringify(raw, null, 2)}\n`);
    } else if (data.nodes.length === 0) {
      ctx.stdout.write('No gateway nodes yet. Create one with: zenova gateway-node create --name NAME --address ADDRESS\n');
    } else {
      ctx.stdout.write(renderNodeTable(data.nodes, currentTime(ctx)));
    }
    return EXIT_OK;
  });
}

export const listCommand: Command = { name: 'list', summary: 'List the nodes with status, version and live figures', usage: USAGE, run };
