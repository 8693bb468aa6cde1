// `zenova gateway-node …` against a real control-plane process and PostgreSQL (plain HTTP here;
// gateway-node-tls.test.ts covers HTTPS verification).
import { X509Certificate } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { PROTOCOL_VERSION } from '../../proto/src/protocol-version.js';
import { createTestCa } from '../fixtures/tls.js';
import { ADMIN_TOKEN, printedCommand, startControlPlane, tempDir, zenova, zenovaProcess } from './gateway-node-harness.js';

const CALLBACK = 'https://cp.zenova.test:7400';
const TOKEN = /zn_it_[A-Za-z0-9_-]{43}/;

const cp = await startControlPlane(t);
const cwd = tempDir(t); // no .zenova/dev.env here, so only the env given below counts
const env = { ZENOVA_CONTROL_PLANE_URL: cp.url, ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN };
const run = (...argv: string[]): ReturnType<typeof zenova> => zenova(argv, { env, cwd });

/** create with the callback URL the API accepts (the test control plane itself is plain HTTP). */
const create = (name: string, ...more: string[]): ReturnType<typeof zenova> =>
  run('gateway-node', 'create', '--name', name, '--address', `${name}.example.com`, '--control-plane-url', CALLBACK, ...more);

t.test('create prints the node and its one-time install command in the seed form, the token piped in', async (t) => {
  const result = await create('edge-one', '--region', 'cn-east', '--surfaces', 'model,tools');
  t.equal(result.code, 0, 'exits 0', { stderr: result.stderr });
  t.match(result.stdout, /Created gateway node edge-one\./);
  t.match(result.stdout, /shown once; store it safely; do not paste it into chat\/e-mail/);
  const command = printedCommand(result.stdout);
  t.match(command, new RegExp(`^printf '%s\\\\n' ${TOKEN.source} \\| sudo \\./zenova install node --package zenova-node\\.zpkg --control-plane ${CALLBACK} --token-file -$`));
  // The advice under it fits the piped form (it told to replace a "--token <token>" no longer there).
  t.match(result.stdout, /The token is piped in .*so it is in no process list/);
  t.notMatch(result.stdout, /--token </, 'no advice about a --token the command does not have');
  t.match(result.stdout, /region\s+cn-east/);
  t.match(result.stdout, /surfaces\s+model, tools/);
  t.match(result.stdout, /status\s+pending/);
  t.match(result.stdout, /install dir\s+\/opt\/zenova-node \(default\)/);
  t.notMatch(result.stdout + result.stderr, ADMIN_TOKEN, 'the admin token is never printed');
});

t.test('create with a CA and an install dir adds --ca-file and --install-dir, and --ca-out saves that CA', async (t) => {
  const ca = await createTestCa();
  const dir = tempDir(t);
  const caFile = path.join(dir, 'internal-ca.pem');
  writeFileSync(caFile, ca.certPem);
  const caOut = path.join(dir, 'saved-ca.pem');
  const result = await create('edge-ca', '--ca-file', caFile, '--install-dir', '/srv/zenova-node', '--ca-out', caOut);
  t.equal(result.code, 0, 'exits 0', { stderr: result.stderr });
  t.match(printedCommand(result.stdout), new RegExp(
    `^printf '%s\\\\n' ${TOKEN.source} \\| sudo \\./zenova install node --package zenova-node\\.zpkg --control-plane ${CALLBACK} --token-file - --ca-file zenova-control-plane-ca\\.pem --install-dir /srv/zenova-node$`,
  ));
  t.ok(new X509Certificate(readFileSync(caOut, 'utf8')).fingerprint256 === new X509Certificate(ca.certPem).fingerprint256, '--ca-out holds the CA given');
  t.match(result.stdout, `Saved the control-plane CA to ${caOut}`);
  t.match(result.stdout, /as zenova-control-plane-ca\.pem/);
  t.match(result.stdout, /CA:\s+own CA/);
});

t.test('create --json prints the API answer: the node and its install command', async (t) => {
  const result = await create('edge-json', '--json', '--replicas', '2', '--spool-quota-gb', '20', '--spool-full-policy', 'metering-only');
  t.equal(result.code, 0, 'exits 0', { stderr: result.stderr });
  const body = JSON.parse(result.stdout);
  t.equal(body.node.name, 'edge-json');
  t.equal(body.node.status, 'pending');
  t.equal(body.node.replicas, 2);
  t.equal(body.node.spoolQuotaGb, 20);
  t.equal(body.node.spoolFullPolicy, 'metering-only');
  t.match(body.install.token, TOKEN);
  t.equal(body.install.command, `printf '%s\\n' ${body.install.token} | sudo ./zenova install node --package zenova-node.zpkg --control-plane ${CALLBACK} --token-file -`);
});

t.test('list prints the node table with the console columns; --json the API answer', async (t) => {
  t.equal((await create('edge-list')).code, 0);
  const table = await run('gateway-node', 'list');
  t.equal(table.code, 0, 'exits 0', { stderr: table.stderr });
  const [header, ...rows] = table.stdout.trimEnd().split('\n');
  t.match(header, /^NAME\s+STATUS\s+VERSION\s+CONFIG BEHIND\s+LAST HEARTBEAT\s+REQ 5M\s+ERR 5M\s+BACKLOG\s+SPOOL$/);
  const row = rows.find((r) => r.startsWith('edge-list '));
  t.ok(row, 'a row for the node');
  t.match(row, /^edge-list\s+pending\s+-\s+-\s+never\s+-\s+-\s+-\s+-$/, 'no heartbeat yet: no figures, not zeros');

  const json = await run('gateway-node', 'list', '--json');
  t.equal(json.code, 0);
  const names = (JSON.parse(json.stdout).nodes as Array<{ name: string }>).map((n) => n.name);
  t.ok(names.includes('edge-list'));
});

t.test('show prints one node, its config state included; --json its view; an unknown name is the API\'s not-found error', async (t) => {
  t.equal((await create('edge-show', '--region', 'eu-west')).code, 0);
  const shown = await run('gateway-node', 'show', 'edge-show');
  t.equal(shown.code, 0, 'exits 0', { stderr: shown.stderr });
  t.match(shown.stdout, /^Node edge-show \(id [0-9a-f-]{36}\)$/m);
  t.match(shown.stdout, /region\s+eu-west/);
  t.match(shown.stdout, /address\s+edge-show\.example\.com/);
  t.match(shown.stdout, new RegExp(`control plane\\s+${CALLBACK}`));
  t.match(shown.stdout, /last heartbeat\s+never/);
  t.match(shown.stdout, /config applied\s+none yet\n/, "the API's appliedConfigVersion: null");
  t.match(shown.stdout, /config error\s+none\n/, "the API's configError: null");
  for (const label of ['requests 5m', 'error rate 5m', 'backfill backlog', 'spool used']) {
    t.match(shown.stdout, new RegExp(`^ +${label} +-$`, 'm'), `${label}: nothing measured before a heartbeat`);
  }

  const json = await run('gateway-node', 'show', 'edge-show', '--json');
  t.equal(JSON.parse(json.stdout).name, 'edge-show');
  t.match(JSON.parse(json.stdout), { requests5m: null, errorRate5m: null, backfillBacklog: null, spoolBytes: null }, '--json: the API\'s nulls as they are');

  const missing = await run('gateway-node', 'show', 'no-such-node');
  t.equal(missing.code, 1);
  t.match(missing.stderr, /^zenova: error ZN_ERR_CP_NODE_NOT_FOUND: /);
  t.equal(missing.stdout, '');
});

t.test('install-command reissues a new token; reenroll and upgrade commands have their seed forms', async (t) => {
  const created = JSON.parse((await create('edge-reissue', '--json', '--install-dir', '/srv/zenova-node')).stdout);
  const first: string = created.install.token;

  const reissued = await run('gateway-node', 'install-command', 'edge-reissue');
  t.equal(reissued.code, 0, 'exits 0', { stderr: reissued.stderr });
  const command = printedCommand(reissued.stdout);
  const token = TOKEN.exec(command ?? '')?.[0];
  t.ok(token, 'the command carries a token');
  t.not(token, first, 'a new token, not the old one');
  t.match(command, / --install-dir \/srv\/zenova-node$/);
  t.match(reissued.stdout, /shown once; store it safely; do not paste it into chat\/e-mail/);
  t.match(reissued.stdout, /earlier unused install command of node edge-reissue no longer works/);

  const reenroll = await run('gateway-node', 'reenroll-command', 'edge-reissue');
  t.equal(reenroll.code, 0, 'exits 0', { stderr: reenroll.stderr });
  t.match(printedCommand(reenroll.stdout), new RegExp(`^printf '%s\\\\n' ${TOKEN.source} \\| sudo \\./zenova install node --package zenova-node\\.zpkg --reenroll --control-plane ${CALLBACK} --token-file -`));
  t.match(reenroll.stdout, /^Re-enroll command for node edge-reissue/m);

  const upgrade = await run('gateway-node', 'upgrade-command', 'edge-reissue', '--json');
  t.equal(upgrade.code, 0, 'exits 0', { stderr: upgrade.stderr });
  const body = JSON.parse(upgrade.stdout);
  t.equal(body.kind, 'upgrade');
  t.equal(body.command, `printf '%s\\n' ${body.token} | sudo ./zenova install node --package zenova-node.zpkg --control-plane ${CALLBACK} --token-file - --upgrade`, 'never --install-dir on upgrade');
});

t.test('install-command for a node a host already enrolled as warns that redeeming it cuts that host off', async (t) => {
  const created = JSON.parse((await create('edge-enrolled', '--json')).stdout);
  const before = await run('gateway-node', 'install-command', 'edge-enrolled');
  t.equal(before.code, 0, { stderr: before.stderr });
  t.equal(before.stderr, '', 'no warning while no host has enrolled');
  const token = TOKEN.exec(printedCommand(before.stdout) ?? '')?.[0];
  t.not(token, created.install.token);

  const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  const enrolled = await fetch(`${cp.url}/api/enroll`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ token, mode: 'install', facts: { hostname: 'branch-host-7', arch: 'x86_64', version, protocolVersion: PROTOCOL_VERSION } }),
  });
  t.equal(enrolled.status, 200, await enrolled.clone().text());

  const after = await run('gateway-node', 'install-command', 'edge-enrolled');
  t.equal(after.code, 0, 'still issued: a dead host is a reason to reinstall elsewhere');
  t.ok(printedCommand(after.stdout), 'the command is printed');
  t.match(after.stderr, /^warning: node edge-enrolled is enrolled \(host branch-host-7, status \w+, no heartbeat yet\)/);
  t.match(after.stderr, /revokes the credentials of branch-host-7/);
  t.match(after.stderr, /issue reenroll-command instead/);

  const reenroll = await run('gateway-node', 'reenroll-command', 'edge-enrolled');
  t.equal(reenroll.stderr, '', 'a re-enroll command is meant for an enrolled node: no warning');
});

t.test('the node name may be given as --name NAME, as the seed writes it; a different NAME as well is a usage error', async (t) => {
  await create('edge-alias');
  const reenroll = await run('gateway-node', 'reenroll-command', '--name', 'edge-alias');
  t.equal(reenroll.code, 0, 'exits 0', { stderr: reenroll.stderr });
  t.match(printedCommand(reenroll.stdout), / --reenroll /);
  t.match(reenroll.stdout, /^Re-enroll command for node edge-alias/m);
  const shown = await run('gateway-node', 'show', 'edge-alias', '--name', 'edge-alias', '--json');
  t.equal(shown.code, 0, 'the same name twice is fine', { stderr: shown.stderr });
  t.equal(JSON.parse(shown.stdout).name, 'edge-alias');
  for (const sub of ['install-command', 'reenroll-command', 'upgrade-command', 'show', 'delete']) {
    const both = await run('gateway-node', sub, 'edge-alias', '--name', 'edge-other', ...(sub === 'delete' ? ['--yes'] : []));
    t.equal(both.code, 2, `${sub}: exit 2`);
    t.match(both.stderr, /NAME "edge-alias" and --name "edge-other" differ: give the node name once/, sub);
  }
  const help = await run('gateway-node', 'reenroll-command', '--help');
  t.match(help.stdout, /--name NAME/);
  t.equal((await run('gateway-node', 'show', 'edge-alias')).code, 0, 'nothing was deleted');
});

t.test('a node name of . or .. is bad usage: URL resolution would send the request to another route', async (t) => {
  for (const name of ['.', '..']) {
    for (const argv of [['show', name], ['delete', name, '--yes'], ['reenroll-command', '--name', name], ['install-command', name]]) {
      const result = await run('gateway-node', ...argv);
      t.equal(result.code, 2, `${argv.join(' ')}: exit 2`);
      t.match(result.stderr, new RegExp(`"${name.replace(/\./g, '\\.')}" is not a node name`), argv.join(' '));
    }
  }
});

t.test('a --ca-out that cannot be written is bad usage before the node is created or a command reissued', async (t) => {
  const missingDir = await create('edge-ca-out-bad', '--ca-out', '/nonexistent-zenova-dir/ca.pem');
  t.equal(missingDir.code, 2);
  t.match(missingDir.stderr, /^zenova: --ca-out \/nonexistent-zenova-dir\/ca\.pem: the directory \/nonexistent-zenova-dir does not exist\n/);
  t.equal((await run('gateway-node', 'show', 'edge-ca-out-bad')).code, 1, 'no node was created');
  t.equal((await create('edge-ca-out-ok')).code, 0);
  for (const [value, message] of [['', /--ca-out is empty/], [tempDir(t), /is a directory/]] as const) {
    const reissue = await run('gateway-node', 'install-command', 'edge-ca-out-ok', '--ca-out', value);
    t.equal(reissue.code, 2, JSON.stringify(value));
    t.match(reissue.stderr, message);
    t.notMatch(reissue.stdout, /zenova install node/, 'no command was issued (the first one still works)');
  }
});

t.test('an empty --install-dir, --ca-file, --region or --control-plane-url (an unset shell variable) is bad usage, and no node is created at the default', async (t) => {
  for (const option of ['--install-dir', '--ca-file', '--region', '--control-plane-url']) {
    const result = option === '--control-plane-url'
      ? await run('gateway-node', 'create', '--name', 'edge-empty-opt', '--address', 'edge-empty-opt.example.com', option, '')
      : await create('edge-empty-opt', option, '');
    t.equal(result.code, 2, `${option} '': exit 2`);
    t.match(result.stderr, new RegExp(`${option} is empty \\(an unset shell variable\\?\\)`), option);
    t.equal((await run('gateway-node', 'show', 'edge-empty-opt')).code, 1, `${option} '': no node was created`);
  }
});

t.test('--ca-out with --json says on stderr when the node has no CA to write', async (t) => {
  t.equal((await create('edge-json-no-ca')).code, 0);
  const caOut = path.join(tempDir(t), 'ca.pem');
  const result = await run('gateway-node', 'install-command', 'edge-json-no-ca', '--json', '--ca-out', caOut);
  t.equal(result.code, 0);
  t.match(result.stderr, /node edge-json-no-ca has no control-plane CA, so nothing was written to /);
  t.notOk(existsSync(caOut));
});

t.test('a command for a node with a CA prints that CA unless --ca-out writes it', async (t) => {
  const ca = await createTestCa();
  const dir = tempDir(t);
  const caFile = path.join(dir, 'ca.pem');
  writeFileSync(caFile, ca.certPem);
  t.equal((await create('edge-ca-reissue', '--ca-file', caFile)).code, 0);

  const printed = await run('gateway-node', 'install-command', 'edge-ca-reissue');
  t.equal(printed.code, 0, 'exits 0', { stderr: printed.stderr });
  t.match(printedCommand(printed.stdout), / --ca-file zenova-control-plane-ca\.pem$/);
  t.match(printed.stdout, /save this CA under that name on the node host/);
  t.match(printed.stdout, /-----BEGIN CERTIFICATE-----/);

  const caOut = path.join(dir, 'out.pem');
  const written = await run('gateway-node', 'install-command', 'edge-ca-reissue', '--ca-out', caOut);
  t.equal(written.code, 0, 'exits 0', { stderr: written.stderr });
  t.notMatch(written.stdout, /-----BEGIN CERTIFICATE-----/);
  t.equal(new X509Certificate(readFileSync(caOut, 'utf8')).fingerprint256, new X509Certificate(ca.certPem).fingerprint256);
});

t.test('delete refuses without --yes (exit 2, node kept) and deletes with it', async (t) => {
  t.equal((await create('edge-delete')).code, 0);
  const refused = await run('gateway-node', 'delete', 'edge-delete');
  t.equal(refused.code, 2);
  t.match(refused.stderr, /deleting node edge-delete revokes its credentials .*add --yes to confirm/);
  t.equal((await run('gateway-node', 'show', 'edge-delete')).code, 0, 'still there');

  const deleted = await run('gateway-node', 'delete', 'edge-delete', '--yes');
  t.equal(deleted.code, 0, 'exits 0', { stderr: deleted.stderr });
  t.match(deleted.stdout, /^Deleted gateway node edge-delete/);
  const gone = await run('gateway-node', 'show', 'edge-delete');
  t.equal(gone.code, 1);
  t.match(gone.stderr, /error ZN_ERR_CP_NODE_NOT_FOUND/);
});

t.test('a validation refusal prints the API code, the field and its rule, and the option to change, and exits 2 (bad usage)', async (t) => {
  const result = await create('edge-bad-dir', '--install-dir', '/tmp/zenova-node');
  t.equal(result.code, 2, 'a value the API refuses is bad usage, like one the CLI refuses');
  t.equal(result.stderr, 'zenova: error ZN_ERR_CP_INVALID_REQUEST: installDir: must not be under /tmp (option --install-dir)\n');
  t.equal(result.stdout, '');
  t.equal((await run('gateway-node', 'show', 'edge-bad-dir')).code, 1, 'nothing was created');

  const badName = await create('Edge_Bad');
  t.equal(badName.code, 2);
  t.match(badName.stderr, /error ZN_ERR_CP_INVALID_REQUEST: name: .* \(option --name\)/);
});

t.test('the default callback URL is ZENOVA_CONTROL_PLANE_URL, and its refusal says so', async (t) => {
  // The test control plane is plain HTTP, which a node callback URL must not be.
  const result = await run('gateway-node', 'create', '--name', 'edge-default-url', '--address', '10.0.0.9');
  t.equal(result.code, 2);
  t.match(result.stderr, /error ZN_ERR_CP_INVALID_REQUEST: controlPlaneUrl: must start with https:\/\/ \(taken from ZENOVA_CONTROL_PLANE_URL; set it with --control-plane-url\)/);
});

t.test('a repeated option is bad usage, not the last one silently: delete --name a --name b deletes neither', async (t) => {
  t.equal((await create('edge-keep-a')).code, 0);
  t.equal((await create('edge-keep-b')).code, 0);
  const twice = await run('gateway-node', 'delete', '--name', 'edge-keep-a', '--name', 'edge-keep-b', '--yes');
  t.equal(twice.code, 2);
  t.match(twice.stderr, /^zenova: --name is given more than once: give it once\n/);
  t.equal((await run('gateway-node', 'show', 'edge-keep-a')).code, 0, 'a is still there');
  t.equal((await run('gateway-node', 'show', 'edge-keep-b')).code, 0, 'b is still there');
});

t.test('a taken name is the API\'s NAME_TAKEN error', async (t) => {
  t.equal((await create('edge-twice')).code, 0);
  const again = await create('edge-twice');
  t.equal(again.code, 1);
  t.match(again.stderr, /^zenova: error ZN_ERR_CP_NODE_NAME_TAKEN: /);
});

t.test('a wrong admin token prints ZN_ERR_CP_UNAUTHENTICATED, exit 1, and never the token', async (t) => {
  const wrong = `wrong-admin-token-${'x'.repeat(32)}`;
  const result = await zenova(['gateway-node', 'list'], { env: { ...env, ZENOVA_ADMIN_TOKEN: wrong }, cwd });
  t.equal(result.code, 1);
  t.match(result.stderr, /^zenova: error ZN_ERR_CP_UNAUTHENTICATED: Invalid admin bearer token\. \(check ZENOVA_ADMIN_TOKEN from the environment against http:\/\/127\.0\.0\.1:\d+\)\n$/);
  t.notMatch(result.stderr, wrong);
});

t.test('missing settings are usage errors (exit 2) that name the variable; nothing is sent', async (t) => {
  const noUrl = await zenova(['gateway-node', 'list'], { env: { ZENOVA_ADMIN_TOKEN: ADMIN_TOKEN }, cwd });
  t.equal(noUrl.code, 2);
  t.match(noUrl.stderr, /^zenova: ZENOVA_CONTROL_PLANE_URL is not set \(looked in the environment\): set it to the control plane's URL/);
  t.match(noUrl.stderr, /under sudo, which drops the caller's environment, use --env-file or sudo --preserve-env=ZENOVA_CONTROL_PLANE_URL,ZENOVA_ADMIN_TOKEN,ZENOVA_CA_FILE/);
  t.match(noUrl.stderr, /--env-file F \(the dev stack writes \.zenova\/dev\.env\)/);
  t.match(noUrl.stderr, /Run "zenova gateway-node list --help" for usage\./);

  const noToken = await zenova(['gateway-node', 'list'], { env: { ZENOVA_CONTROL_PLANE_URL: cp.url }, cwd });
  t.equal(noToken.code, 2);
  t.match(noToken.stderr, /ZENOVA_ADMIN_TOKEN is not set/);

  const badUrl = await zenova(['gateway-node', 'list'], { env: { ...env, ZENOVA_CONTROL_PLANE_URL: 'cp.example.com:7400' }, cwd });
  t.equal(badUrl.code, 2);
  t.match(badUrl.stderr, /ZENOVA_CONTROL_PLANE_URL \(from the environment\) must start with https:\/\//);
});

t.test('usage errors exit 2 with the command\'s help pointer', async (t) => {
  const noName = await run('gateway-node', 'create', '--address', 'a.example.com');
  t.equal(noName.code, 2);
  t.match(noName.stderr, /^zenova: --name is required\nRun "zenova gateway-node create --help" for usage\.\n$/);

  const badNumber = await create('edge-num', '--replicas', 'two');
  t.equal(badNumber.code, 2);
  t.match(badNumber.stderr, /--replicas must be a whole number, got "two"/);

  const unknown = await run('gateway-node', 'list', '--colour');
  t.equal(unknown.code, 2);
  t.match(unknown.stderr, /unknown option --colour; see --help for the options/);
  const typo = await run('gateway-node', 'list', '--jsn');
  t.equal(typo.code, 2);
  t.match(typo.stderr, /unknown option --jsn; did you mean --json\?/, 'a typo gets the option it most likely meant');

  const noNodeName = await run('gateway-node', 'show');
  t.equal(noNodeName.code, 2);
  t.match(noNodeName.stderr, /NAME \(or --name NAME\) is required/);

  const badSub = await run('gateway-node', 'rename');
  t.equal(badSub.code, 2);
  t.match(badSub.stderr, /unknown gateway-node command "rename"/);

  const missingCa = await create('edge-no-ca', '--ca-file', path.join(cwd, 'missing.pem'));
  t.equal(missingCa.code, 2);
  t.match(missingCa.stderr, /cannot read --ca-file .*missing\.pem: ENOENT/);
});

t.test('--help works for every command, exits 0 and needs no settings', async (t) => {
  const cases: Array<[string[], RegExp]> = [
    [['--help'], /^Usage: zenova <command>/],
    [['gateway-node', '--help'], /^Usage: zenova gateway-node <command>/],
    [['gateway-node', 'create', '--help'], /^Usage: zenova gateway-node create --name NAME --address ADDRESS/],
    [['gateway-node', 'list', '--help'], /^Usage: zenova gateway-node list/],
    [['gateway-node', 'show', '--help'], /^Usage: zenova gateway-node show NAME/],
    [['gateway-node', 'install-command', '--help'], /^Usage: zenova gateway-node install-command NAME/],
    [['gateway-node', 'reenroll-command', '--help'], /^Usage: zenova gateway-node reenroll-command NAME/],
    [['gateway-node', 'upgrade-command', '--help'], /^Usage: zenova gateway-node upgrade-command NAME/],
    [['gateway-node', 'delete', '-h'], /^Usage: zenova gateway-node delete NAME --yes/],
  ];
  for (const [argv, usage] of cases) {
    const result = await zenova(argv, { env: {}, cwd });
    t.equal(result.code, 0, argv.join(' '));
    t.match(result.stdout, usage, argv.join(' '));
    t.match(result.stdout, /--help|<command> --help/, `${argv.join(' ')} mentions --help`);
  }
  const create = await zenova(['gateway-node', 'create', '--help'], { env: {}, cwd });
  for (const option of ['--name', '--address', '--region', '--surfaces', '--spool-quota-gb', '--spool-full-policy', '--replicas', '--install-dir', '--control-plane-url', '--ca-file', '--ca-out', '--json', '--env-file']) {
    t.match(create.stdout, option);
  }
});

t.test('--version prints the release from package.json, exits 0 and needs no settings', async (t) => {
  const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  const result = await zenova(['--version'], { env: {}, cwd });
  t.equal(result.code, 0);
  t.equal(result.stdout, `${version}\n`);
  t.equal(result.stderr, '');
  const help = await zenova(['--help'], { env: {}, cwd });
  t.match(help.stdout, /"zenova --version" prints the release/);
});

t.test('--env-file supplies the connection; .zenova/dev.env in the working directory is the default', async (t) => {
  const dir = tempDir(t);
  const envFile = path.join(dir, 'cp.env');
  writeFileSync(envFile, `# written by a test\nexport ZENOVA_CONTROL_PLANE_URL=${cp.url}\nZENOVA_ADMIN_TOKEN="${ADMIN_TOKEN}"\n`);
  const explicit = await zenova(['gateway-node', 'list', '--env-file', envFile], { env: { ZENOVA_CONTROL_PLANE_URL: 'http://127.0.0.1:1' }, cwd });
  t.equal(explicit.code, 0, 'exits 0', { stderr: explicit.stderr });
  t.match(explicit.stdout, /^NAME\s+STATUS/);

  const devHome = tempDir(t);
  mkdirSync(path.join(devHome, '.zenova'));
  writeFileSync(path.join(devHome, '.zenova', 'dev.env'), `ZENOVA_CONTROL_PLANE_URL=${cp.url}\nZENOVA_ADMIN_TOKEN=${ADMIN_TOKEN}\n`);
  const byDefault = await zenova(['gateway-node', 'list'], { env: {}, cwd: devHome });
  t.equal(byDefault.code, 0, 'exits 0', { stderr: byDefault.stderr });

  // Any connection variable in the environment wins over the file as a whole: no mixing of sources.
  const mixed = await zenova(['gateway-node', 'list'], { env: { ZENOVA_CONTROL_PLANE_URL: cp.url }, cwd: devHome });
  t.equal(mixed.code, 2);
  t.match(mixed.stderr, /ZENOVA_ADMIN_TOKEN is not set \(looked in the environment\)/);

  writeFileSync(envFile, 'this is not an assignment\n');
  const broken = await zenova(['gateway-node', 'list', '--env-file', envFile], { env: {}, cwd });
  t.equal(broken.code, 2);
  t.match(broken.stderr, /cp\.env:1: expected KEY=VALUE/);
});

t.test('an unreachable control plane is one line and exit 1', async (t) => {
  const result = await zenova(['gateway-node', 'list'], { env: { ...env, ZENOVA_CONTROL_PLANE_URL: 'http://127.0.0.1:1' }, cwd });
  t.equal(result.code, 1);
  t.equal(result.stderr, 'zenova: cannot reach the control plane at http://127.0.0.1:1: connection refused (is it running, and is the port right?)\n');
});

t.test('the zenova entry point runs as its own process with the same exit codes', async (t) => {
  const created = await zenovaProcess(t, ['gateway-node', 'create', '--name', 'edge-process', '--address', '10.1.2.3', '--control-plane-url', CALLBACK], { env, cwd });
  t.equal(created.code, 0, 'exits 0', { output: created.output });
  t.match(created.output, new RegExp(`printf '%s\\\\n' ${TOKEN.source} \\| sudo \\./zenova install node --package zenova-node\\.zpkg --control-plane ${CALLBACK} --token-file -`));

  const refused = await zenovaProcess(t, ['gateway-node', 'delete', 'edge-process'], { env, cwd });
  t.equal(refused.code, 2);
  const wrongToken = await zenovaProcess(t, ['gateway-node', 'list'], { env: { ...env, ZENOVA_ADMIN_TOKEN: 'not-the-admin-token' }, cwd });
  t.equal(wrongToken.code, 1);
  t.match(wrongToken.output, /error ZN_ERR_CP_UNAUTHENTICATED/);
});
