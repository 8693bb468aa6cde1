// `zenova gateway-node show NAME`: GET /api/v1/nodes/:name (or --json).
import { flagOption, nodeNameArgument, parseOptions, stringOption, wantsHelp } from '../../args.js';
import type { OptionSpec } from '../../args.js';
import { EXIT_OK, currentTime } from '../../cli-context.js';
import type { CliContext, Command } from '../../cli-context.js';
import { withAdminClient } from '../../connection/admin-session.js';
import { nodeViewSchema } from './api-schemas.js';
import { COMMON_OPTIONS, COMMON_USAGE, JSON_OPTION, JSON_USAGE, NAME_OPTION, NAME_USAGE } from './common-options.js';
import { nodePath } from './node-path.js';
import { renderNodeDetail } from './node-format.js';

const HELP = 'gateway-node show';
const OPTIONS = { ...NAME_OPTION, ...JSON_OPTION, ...COMMON_OPTIONS } as const satisfies OptionSpec;

const USAGE = `Usage: zenova gateway-node show NAME [--json]

Shows one gateway node: its settings, status and onboarding stage, version, host, last heartbeat,
its clock's skew against the control plane's (beyond ±30 s its host clock needs syncing), the config
version it applied, how many it is behind and its config error (why it did not apply the latest:
the code, such as CONFIG_BAD_SIGNATURE or CONFIG_BUILD_FAILED, the version, when, and the message),
and live figures.

Options:
${NAME_USAGE}
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
  return withAdminClient(ctx, stringOption(parsed, 'env-file'), HELP, async (client) => {
    const { data, raw } = await client.call('GET', nodePath(name), nodeViewSchema);
    ctx.stdout.write(flagOption(parsed, 'json') ? `${JSON.stringify(raw, null, 2)}\n` : renderNodeDetail(data, currentTime(ctx)));
    return EXIT_OK;
  });
}

export const showCommand: Command = { name: 'show', summary: 'Show one node', usage: USAGE, run };
