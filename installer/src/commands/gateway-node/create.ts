// `zenova gateway-node create`: POST /api/v1/nodes, then the node and its one-time install command.
import {
  flagOption, integerOption, listOption, nonEmptyOption, noPositionals, parseOptions, requiredOption, stringOption, wantsHelp,
} from '../../args.js';
import type { OptionSpec } from '../../args.js';
import { EXIT_OK, currentTime } from '../../cli-context.js';
import type { CliContext, Command } from '../../cli-context.js';
import { isLoopbackHost } from '../../../../proto/src/loopback-host.js';
import { ApiError } from '../../connection/admin-client.js';
import { withAdminClient } from '../../connection/admin-session.js';
import { CA_VARIABLE, URL_VARIABLE } from '../../connection/connection-settings.js';
import type { ConnectionSettings } from '../../connection/connection-settings.js';
import { checkCertificateOutOption, readPemOption } from '../../local-files.js';
import { createdNodeSchema } from './api-schemas.js';
import type { CreateNodeRequest } from './api-schemas.js';
import { COMMON_OPTIONS, COMMON_USAGE, JSON_OPTION, JSON_USAGE } from './common-options.js';
import { renderNodeDetail } from './node-format.js';
import { SHOWN_ONCE_WARNING, printOneTimeCommand, saveCaBesideJson } from './one-time-command-output.js';

const HELP = 'gateway-node create';

const OPTIONS = {
  name: { type: 'string' },
  address: { type: 'string' },
  region: { type: 'string' },
  surfaces: { type: 'string' },
  'install-dir': { type: 'string' },
  'control-plane-url': { type: 'string' },
  'ca-file': { type: 'string' },
  'spool-quota-gb': { type: 'string' },
  'spool-full-policy': { type: 'string' },
  replicas: { type: 'string' },
  'ca-out': { type: 'string' },
  ...JSON_OPTION,
  ...COMMON_OPTIONS,
} as const satisfies OptionSpec;

const USAGE = `Usage: zenova gateway-node create --name NAME --address ADDRESS [options]

Creates a gateway node on the control plane and prints it with its one-time install command
(${SHOWN_ONCE_WARNING}). The API checks every value and names the field it refuses.

Options:
  --name NAME           Node name: lowercase letters, digits and hyphens, 2-31 characters;
                        it cannot be changed later
  --address ADDRESS     Domain name or IP that callers use to reach the node
  --region R            Region label (optional)
  --surfaces LIST       Comma list of the surfaces it serves: model (required), tools
                        (default: model)
  --install-dir D       Install directory on the node host (default /opt/zenova-node): absolute,
                        at least two levels, not under /tmp, /var/tmp, /home, /root, /run/user,
                        /usr, /etc, /boot, not inside /opt/zenova
  --control-plane-url URL
                        Address the node calls back, https://... (default: ${URL_VARIABLE})
  --ca-file F           PEM of the CA that verifies the control plane for the node (a self-signed
                        or internal CA); leave out for a publicly trusted certificate
  --spool-quota-gb G    Local spool quota in GiB (1024³ bytes) for when the node is cut off (default 10)
  --spool-full-policy P When the spool is full: reject (new requests refused, every request stays
                        billable) or metering-only (request bodies dropped, metering kept)
                        (default reject)
  --replicas K          node-edge processes on the node host (1-16, default 1): the install
                        command's enrollment carries it and the installer runs that many
  --ca-out F            Write the CA the install command's --ca-file refers to into F
                        (never over a file holding anything else: see docs/install.md)
${JSON_USAGE}
${COMMON_USAGE}
`;

/** API field → the option that sets it, so a refusal points at what to change. */
const FIELD_OPTIONS: Record<string, string> = {
  name: '--name',
  address: '--address',
  region: '--region',
  surfaces: '--surfaces',
  installDir: '--install-dir',
  controlPlaneUrl: '--control-plane-url',
  caPem: '--ca-file',
  spoolQuotaGb: '--spool-quota-gb',
  spoolFullPolicy: '--spool-full-policy',
  replicas: '--replicas',
};

/** Adds the option to each `field: rule` part of a validation refusal ("…; name: …"). */
function withOptionHints(err: unknown, controlPlaneUrlGiven: boolean): unknown {
  if (!(err instanceof ApiError) || err.code !== 'ZN_ERR_CP_INVALID_REQUEST') return err;
  const parts = err.message.split('; ').map((part) => {
    const field = /^([A-Za-z]+)(?:[.[][^:]*)?:/.exec(part)?.[1];
    const option = field === undefined ? undefined : FIELD_OPTIONS[field];
    if (option === undefined) return part;
    if (option === '--control-plane-url' && !controlPlaneUrlGiven) return `${part} (taken from ${URL_VARIABLE}; set it with --control-plane-url)`;
    return `${part} (option ${option})`;
  });
  return new ApiError(err.code, parts.join('; '), err.status);
}

/**
 * What the API accepts but a remote node host will trip over at install: a callback URL taken from
 * a loopback ZENOVA_CONTROL_PLANE_URL (the node would call itself), and no CA for the node while
 * this CLI needs ZENOVA_CA_FILE to trust the control plane (the install then fails NODE-CP-TLS).
 */
export function creationWarnings(nodeName: string, callbackUrl: string, defaulted: boolean, nodeGetsCa: boolean, conn: ConnectionSettings): string[] {
  const warnings: string[] = [];
  const host = URL.canParse(callbackUrl) ? new URL(callbackUrl).hostname : '';
  if (defaulted && isLoopbackHost(host)) {
    warnings.push(`node ${nodeName} will call the control plane back at ${callbackUrl} (${URL_VARIABLE}), a loopback address: `
      + 'a node on another host reaches itself there, not the control plane. Unless the node runs on this host, '
      + 'create it with --control-plane-url set to an address the node host can reach.');
  }
  if (!nodeGetsCa && conn.caFile !== undefined) {
    warnings.push(`node ${nodeName} gets no CA, yet this CLI trusts the control plane only through ${CA_VARIABLE} (${conn.caFile}): `
      + `if that CA also signed the certificate at ${callbackUrl}, the install fails (NODE-CP-TLS). `
      + `Set it on the node (PATCH /api/v1/nodes/${nodeName}/network with caPem), or delete the node and create it with --ca-file.`);
  }
  return warnings.map((warning) => `warning: ${warning}\n`);
}

async function run(argv: readonly string[], ctx: CliContext): Promise<number> {
  if (wantsHelp(argv)) {
    ctx.stdout.write(USAGE);
    return EXIT_OK;
  }
  const parsed = parseOptions(argv, OPTIONS, HELP);
  noPositionals(parsed, HELP);
  const name = requiredOption(parsed, 'name', HELP);
  const address = requiredOption(parsed, 'address', HELP);
  const surfaces = listOption(parsed, 'surfaces', HELP) ?? ['model'];
  const spoolQuotaGb = integerOption(parsed, 'spool-quota-gb', HELP);
  const replicas = integerOption(parsed, 'replicas', HELP);
  // An empty value is most likely an unset shell variable: refused rather than read as "the default".
  const caFile = nonEmptyOption(parsed, 'ca-file', HELP, 'pass the CA file, or leave --ca-file out when the control plane has a publicly trusted certificate');
  const installDir = nonEmptyOption(parsed, 'install-dir', HELP, 'pass the install dir, or leave --install-dir out for the default /opt/zenova-node');
  const region = nonEmptyOption(parsed, 'region', HELP, 'pass the region, or leave --region out');
  const caPem = caFile === undefined ? undefined : readPemOption(caFile, '--ca-file', ctx.cwd, HELP);
  const explicitUrl = nonEmptyOption(parsed, 'control-plane-url', HELP, 'pass the callback URL nodes use, or leave --control-plane-url out for the one the admin connection uses');
  const caOut = stringOption(parsed, 'ca-out');
  checkCertificateOutOption(caOut, '--ca-out', ctx.cwd, HELP);
  const json = flagOption(parsed, 'json');

  return withAdminClient(ctx, stringOption(parsed, 'env-file'), HELP, async (client, conn) => {
    const request: CreateNodeRequest = { name, address, surfaces, controlPlaneUrl: explicitUrl ?? conn.displayUrl };
    if (region !== undefined) request.region = region;
    if (installDir !== undefined) request.installDir = installDir;
    const spoolFullPolicy = stringOption(parsed, 'spool-full-policy');
    if (spoolFullPolicy !== undefined) request.spoolFullPolicy = spoolFullPolicy;
    if (spoolQuotaGb !== undefined) request.spoolQuotaGb = spoolQuotaGb;
    if (replicas !== undefined) request.replicas = replicas;
    if (caPem !== undefined) request.caPem = caPem;

    let created;
    try {
      created = await client.call('POST', 'api/v1/nodes', createdNodeSchema, request);
    } catch (err) {
      throw withOptionHints(err, explicitUrl !== undefined);
    }
    const { node, install } = created.data;
    const nodeCa = install.caPem ?? created.data.caPem ?? caPem;
    for (const warning of creationWarnings(node.name, request.controlPlaneUrl, explicitUrl === undefined, node.hasCa, conn)) ctx.stderr.write(warning);
    if (json) {
      ctx.stdout.write(`${JSON.stringify(created.raw, null, 2)}\n`);
      saveCaBesideJson(ctx, node.name, caOut, node.hasCa ? nodeCa : undefined);
      return EXIT_OK;
    }
    ctx.stdout.write(`Created gateway node ${node.name}.\n\n`);
    ctx.stdout.write(renderNodeDetail(node, currentTime(ctx)));
    ctx.stdout.write('\n');
    printOneTimeCommand(ctx, {
      nodeName: node.name,
      kind: 'install',
      issued: install,
      caPem: nodeCa,
      caSourceFile: caFile,
      caOut,
      reissued: false,
    });
    return EXIT_OK;
  });
}

export const createCommand: Command = { name: 'create', summary: 'Create a node and print its one-time install command', usage: USAGE, run };
