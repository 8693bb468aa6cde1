// Options every `zenova gateway-node` subcommand takes, and their lines in the usage texts.
import type { OptionSpec } from '../../args.js';

export const COMMON_OPTIONS = {
  'env-file': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies OptionSpec;

export const JSON_OPTION = { json: { type: 'boolean' } } as const satisfies OptionSpec;

/** `--name NAME`, an alias of the positional NAME (seed 004 §9.6 writes `reenroll-command --name`). */
export const NAME_OPTION = { name: { type: 'string' } } as const satisfies OptionSpec;

export const NAME_USAGE = '  --name NAME           The node\'s name, instead of NAME (both given must be the same)';

export const COMMON_USAGE = `  --env-file F          Read ZENOVA_CONTROL_PLANE_URL, ZENOVA_ADMIN_TOKEN and ZENOVA_CA_FILE
                        from F (KEY=VALUE lines) instead of the environment
  -h, --help            Show this help`;

export const JSON_USAGE = '  --json                Print the API\'s JSON answer instead of text';
