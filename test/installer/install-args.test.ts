/**
 * `zenova install node`, `zenova status` and `zenova logs` command lines: the combinations the seed
 * forbids are usage errors (exit 2) before anything is checked or written, and `logs` hands
 * journalctl only a known unit and a validated --since.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from '../../installer/src/cli.js';
import { runInstall } from '../../installer/src/commands/install.js';
import { runLogs, sinceProblem } from '../../installer/src/commands/logs.js';
import { runStatus } from '../../installer/src/commands/status.js';
import { UsageError } from '../../installer/src/cli-context.js';
import { captureCli, fakeServices, hostEnv, listTree } from './fake-host.js';
import type { FakeServices } from './fake-host.js';

const root = mkdtempSync(join(tmpdir(), 'zn-args-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const BASE = ['node', '--package', 'zenova-node.zpkg', '--control-plane', 'https://cp.example.test'];

async function usage(argv: string[]): Promise<string> {
  const cli = captureCli(root);
  try {
    await runInstall(argv, cli.ctx, hostEnv(root));
  } catch (err) {
    if (err instanceof UsageError) return err.message;
    throw err;
  }
  throw new Error(`no usage error for ${argv.join(' ')}: ${cli.out()}`);
}

t.test('--token with --token-file is refused as a usage error, before any check', async (t) => {
  t.match(await usage([...BASE, '--token', 'a', '--token-file', 'f']), /--token and --token-file exclude each other/);
  const cli = captureCli(root);
  t.equal(await runCli(['install', ...BASE, '--token', 'a', '--token-file', 'f'], cli.ctx), 2, 'exit 2 through the CLI');
  t.notMatch(cli.out(), /checking this host/, 'no check ran');
});

t.test('zenova install without its target says so on stderr and exits 2; --help prints the usage and exits 0', async (t) => {
  t.match(await usage([]), /no install target given/);
  const cli = captureCli(root);
  t.equal(await runCli(['install'], cli.ctx), 2);
  t.match(cli.err(), /zenova: no install target given/);
  const help = captureCli(root);
  t.equal(await runCli(['install', '--help'], help.ctx), 0);
  t.match(help.out(), /zenova install node/);
});

t.test('an empty option value (an unset shell variable) is named as such, before any check', async (t) => {
  // '' resolved against the current dir, and came back as a misleading finding about '/' or the cwd.
  for (const option of ['--install-dir', '--ca-file', '--token-file', '--listen']) {
    t.match(await usage([...BASE, '--check-only', option, '']), new RegExp(`^${option} is empty \\(an unset shell variable\\?\\): `), option);
  }
});

t.test('a --control-plane holding a tab or a line break is a usage error (it would start a line of its own in etc/node.env)', async (t) => {
  for (const url of ['https://cp.example.test\nZENOVA_NODE_LISTEN=0.0.0.0:22', 'https://cp.example.test\t', 'https://cp.\rexample.test']) {
    t.match(await usage(['node', '--package', 'zenova-node.zpkg', '--control-plane', url, '--check-only']), /^--control-plane contains a control character/, JSON.stringify(url));
  }
});

t.test('an install needs a token unless --check-only', async (t) => {
  t.match(await usage(BASE), /--token or --token-file \(or --check-only, which needs no token\) is required/);
});

t.test('every missing option of install node is named at once, not one per run', async (t) => {
  t.equal(await usage(['node']), '--package, --control-plane, --token or --token-file (or --check-only, which needs no token) are required');
  t.equal(await usage(['node', '--check-only']), '--package, --control-plane are required');
  t.equal(await usage(['node', '--check-only', '--package', 'p.zpkg']), '--control-plane is required');
});

t.test('--upgrade keeps the installed dir, address and TLS pair: --install-dir, --listen and --tls-cert/--tls-key are refused with it', async (t) => {
  t.match(await usage([...BASE, '--token', 'a', '--upgrade', '--install-dir', '/data/zn']), /--install-dir cannot be used with --upgrade/);
  t.match(await usage([...BASE, '--token', 'a', '--upgrade', '--listen', '0.0.0.0:8080']), /--listen cannot be used with --upgrade: an upgrade keeps the installed listen address/);
  t.match(await usage([...BASE, '--token', 'a', '--upgrade', '--tls-cert', 'c.pem', '--tls-key', 'k.pem']), /--tls-cert and --tls-key cannot be used with --upgrade/);
  t.match(await usage([...BASE, '--upgrade']), /--token or --token-file \(or --check-only, which needs no token\) is required/);
});

t.test('--reenroll and --upgrade exclude each other, also with --check-only', async (t) => {
  t.match(await usage([...BASE, '--token', 'a', '--reenroll', '--upgrade']), /--reenroll and --upgrade exclude each other/);
  t.match(await usage([...BASE, '--check-only', '--reenroll', '--upgrade']), /--reenroll and --upgrade exclude each other/);
});

t.test('a token file that cannot be read is a usage error naming it', async (t) => {
  t.match(await usage([...BASE, '--token-file', join(root, 'absent.token')]), /cannot read --token-file .*absent\.token \(ENOENT\)/);
});

/** A host root whose node-edge service is installed, and its service manager. */
function installedHost(): { dir: string; services: FakeServices } {
  const dir = mkdtempSync(join(tmpdir(), 'zn-args-installed-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, 'etc/systemd/system'), { recursive: true });
  writeFileSync(join(dir, 'etc/systemd/system/node-edge.service'), '[Service]\nEnvironmentFile=/opt/zenova-node/etc/node.env\n');
  return { dir, services: fakeServices(dir) };
}

t.test('logs: only known components, journalctl gets the unit and --since as given', async (t) => {
  const { dir, services } = installedHost();
  const host = hostEnv(dir, { services });
  const cli = captureCli(root);
  t.equal(await runLogs(['node-edge', '--since', '30 min ago'], cli.ctx, host), 0);
  t.equal(await runLogs(['node-updater', '--lines', '50'], cli.ctx, host), 0);
  t.same(services.calls, ['journal node-edge.service {"since":"30 min ago"}', 'journal zenova-node-update.service {"lines":50}']);
  await t.rejects(runLogs(['node-proxy'], cli.ctx, host), /unknown component "node-proxy"; one of: node-edge, node-updater/);
  await t.rejects(runLogs([], cli.ctx, host), /COMPONENT is required/);
  await t.rejects(runLogs(['node-edge', '--since', '$(reboot)'], cli.ctx, host), /--since may contain only/);
  await t.rejects(runLogs(['node-edge', '--lines', '0'], cli.ctx, host), /--lines must be at least 1/);
  for (const ok of ['30 min ago', '2 hours ago', 'today', 'yesterday', '2026-11-29 08:00:00', '-1h']) t.equal(sinceProblem(ok), undefined, `${ok} accepted`);
  for (const bad of ['', ' ', 'a;b', "'x'", 'x'.repeat(65), 'now\nthen']) t.ok(sinceProblem(bad), `${JSON.stringify(bad.slice(0, 10))} refused`);
  t.equal(services.calls.length, 2, 'journalctl ran only for the valid command lines');
});

t.test('logs node-edge --since -1h, as its help and docs/install.md write it, runs journalctl since one hour ago; the other options parse as before', async (t) => {
  const { dir, services } = installedHost();
  const host = hostEnv(dir, { services });
  t.equal(await runLogs(['node-edge', '--since', '-1h'], captureCli(root).ctx, host), 0);
  t.equal(await runLogs(['node-edge', '--lines', '20', '--since', '-30min'], captureCli(root).ctx, host), 0);
  t.equal(await runLogs(['node-edge', '--since=-2h'], captureCli(root).ctx, host), 0);
  t.equal(await runLogs(['--since', '-1h', 'node-updater'], captureCli(root).ctx, host), 0);
  t.same(services.calls, [
    'journal node-edge.service {"since":"-1h"}',
    'journal node-edge.service {"since":"-30min","lines":20}',
    'journal node-edge.service {"since":"-2h"}',
    'journal zenova-node-update.service {"since":"-1h"}',
  ]);
  const cli = captureCli(root);
  await t.rejects(runLogs(['node-edge', '--since'], cli.ctx, host), /argument missing/, '--since without a value');
  await t.rejects(runLogs(['node-edge', '--since', '--lines', '5'], cli.ctx, host), /ambiguous/, 'an option is not taken as the value of --since');
  await t.rejects(runLogs(['node-edge', '--lines', '-5'], cli.ctx, host), /^--lines must be a whole number, got "-5"$/, '--lines takes no negative number, refused in its own words');
  await t.rejects(runLogs(['node-edge', '--since', '-1h;reboot'], cli.ctx, host), /--since may contain only/, 'a joined value is still checked');
  await t.rejects(runLogs(['node-edge', '--', '--since', '-1h'], cli.ctx, host), /unexpected argument "--since"/, 'nothing after -- is an option');
  t.equal(services.calls.length, 4, 'journalctl ran only for the valid command lines');
});

t.test('logs node-caddy, as the seed\'s troubleshooting writes it, says there is no separate proxy and shows node-edge\'s log', async (t) => {
  const { dir, services } = installedHost();
  const cli = captureCli(root);
  t.equal(await runLogs(['node-caddy', '--since', '30 min ago'], cli.ctx, hostEnv(dir, { services })), 0);
  t.same(services.calls, ['journal node-edge.service {"since":"30 min ago"}']);
  t.equal(cli.err(), 'zenova: node-caddy: there is no separate ingress proxy in this release (node-edge serves callers itself); showing the node-edge log.\n');
  t.equal(cli.out(), 'journal of node-edge.service\n');
  const help = captureCli(root);
  await runLogs(['--help'], help.ctx, hostEnv(root));
  t.match(help.out(), /node-caddy/);
});

t.test('status and logs --help state their own exit codes, which differ from the other commands\'', async (t) => {
  // status exits 1 on a host without an enrolled node (scripts test it); logs passes journalctl's on.
  const status = captureCli(root);
  t.equal(await runCli(['status', '--help'], status.ctx), 0);
  t.match(status.out(), /Exit codes: 0 a node is installed and enrolled.*1 no node is\s+installed here, it is not enrolled, or its current link is broken.*, 2 bad usage/s);
  const logs = captureCli(root);
  t.equal(await runCli(['logs', '--help'], logs.ctx), 0);
  t.match(logs.out(), /Exit codes: journalctl's own \(0 shown\); 1 no node is installed here/);
});

t.test('logs on a host without a node says no node is installed, as status does, and exits 1 instead of journalctl\'s "-- No entries --"', async (t) => {
  for (const component of ['node-edge', 'node-updater', 'node-caddy']) {
    const services: FakeServices = fakeServices(root);
    for (const unit of ['node-edge.service', 'zenova-node-update.service']) services.journals.set(unit, '-- No entries --\n');
    const direct = captureCli(root);
    // A CommandFailure: the CLI prints "zenova: <message>" and exits 1.
    await t.rejects(runLogs([component, '--since', '30 min ago'], direct.ctx, hostEnv(root, { services })), { name: 'CommandFailure', message: /^no gateway node is installed on this host \(no node-edge service\), so there is no node-(edge|updater) log to show$/ }, component);
    t.equal(direct.out(), '', `${component}: journalctl's "-- No entries --" is not passed on`);
    t.notMatch(services.calls.join('\n'), /30 min ago/, `${component}: the asked journal is not shown`);
  }
  const status = captureCli(root);
  t.equal(await runStatus([], status.ctx, hostEnv(root)), 1);
  t.match(status.out(), 'no gateway node is installed on this host (no node-edge service)', 'the words status uses');
});

t.test('logs after a failed first install (units removed, data/ kept) still shows the journal that install left, with a note', async (t) => {
  const services: FakeServices = fakeServices(root);
  services.journals.set('node-edge.service', '-- Journal begins at Mon 2026-03-02 08:00:00 UTC. --\nMar 02 08:01:00 host zenova-node[42]: {"level":50,"msg":"cannot open the spool"}\n');
  const cli = captureCli(root);
  t.equal(await runLogs(['node-edge', '--since', '10 min ago'], cli.ctx, hostEnv(root, { services })), 0);
  t.match(cli.out(), /cannot open the spool/);
  t.equal(cli.err(), 'zenova: note: no gateway node is installed on this host (no node-edge service); showing what the journal kept of an earlier one.\n');
  t.same(services.calls.at(-1), 'journal node-edge.service {"since":"10 min ago"}', 'the journal asked for');
});

t.test('an empty or whitespace token, or an empty token file, is a usage error before any check or write', async (t) => {
  const emptyFile = join(root, 'empty.token');
  writeFileSync(emptyFile, '\n', { mode: 0o600 });
  const spacedFile = join(root, 'spaced.token');
  writeFileSync(spacedFile, 'zn_it_abc def\n', { mode: 0o600 });
  const cases: Array<[string[], RegExp]> = [
    [['--token', ''], /--token is empty \(an unset shell variable\?\)/],
    [['--token', '   '], /--token is empty/],
    [['--token', 'zn_it_abc def'], /--token contains whitespace/],
    [['--token-file', emptyFile], /--token-file .*empty\.token is empty/],
    [['--token-file', spacedFile], /the token in --token-file .*spaced\.token contains whitespace/],
  ];
  for (const [extra, message] of cases) {
    const cli = captureCli(root);
    t.equal(await runCli(['install', ...BASE, ...extra], cli.ctx), 2, `exit 2 for ${JSON.stringify(extra)}`);
    t.match(cli.err(), message);
    t.notMatch(cli.out(), /checking this host/, 'no check ran');
    // The same on a fake host: not one file or systemctl call.
    const services = fakeServices(root);
    const before = listTree(root);
    const fake = captureCli(root);
    await t.rejects(runInstall(['node', '--package', 'zenova-node.zpkg', '--control-plane', 'https://cp.example.test', ...extra], fake.ctx, hostEnv(root, { services })), message);
    t.same(listTree(root), before, 'nothing written');
    t.same(services.calls, [], 'no unit touched');
  }
});

t.test('--reenroll of an installed node with another --listen is a usage error saying the installed address is kept; the same address is accepted', async (t) => {
  const host = mkdtempSync(join(tmpdir(), 'zn-args-reenroll-'));
  t.teardown(() => rmSync(host, { recursive: true, force: true }));
  mkdirSync(join(host, 'etc/systemd/system'), { recursive: true });
  writeFileSync(join(host, 'etc/systemd/system/node-edge.service'), '[Service]\nEnvironmentFile=/opt/zenova-node/etc/node.env\n');
  mkdirSync(join(host, 'opt/zenova-node/etc'), { recursive: true });
  writeFileSync(join(host, 'opt/zenova-node/etc/node.env'), '# Written by `zenova install node`.\nZENOVA_NODE_LISTEN=0.0.0.0:7480\n');
  const services = fakeServices(host);
  const before = listTree(host);
  const cli = captureCli(root);
  const refused = await runInstall([...BASE, '--token', 'zn_it_REENROLL1', '--reenroll', '--listen', '0.0.0.0:9480'], cli.ctx, hostEnv(host, { services })).then(
    (exit) => new Error(`no usage error (exit ${exit})`),
    (err: unknown) => err as Error,
  );
  t.type(refused, UsageError, 'a usage error (exit 2)');
  t.match(refused.message, /--listen cannot change the listen address with --reenroll: a reenroll keeps the installed node's address \(0\.0\.0\.0:7480, ZENOVA_NODE_LISTEN in \/opt\/zenova-node\/etc\/node\.env\); leave out --listen/);
  t.notMatch(cli.out(), /checking this host/, 'no check ran');
  t.same(services.calls, [], 'node-edge was not stopped');
  t.same(listTree(host), before, 'nothing written');

  // The installed address itself is no change: the reenroll goes on to its checks.
  const same = captureCli(root);
  t.equal(await runInstall([...BASE, '--token', 'zn_it_REENROLL1', '--reenroll', '--listen', '0.0.0.0:7480'], same.ctx, hostEnv(host, { services })), 1, 'refused by the checks only (no package here)');
  t.match(same.out(), /checking this host/);
});

t.test('status on a host without a node says so and exits 1, in text and JSON', async (t) => {
  const host = hostEnv(root);
  const before = listTree(root);
  const text = captureCli(root);
  t.equal(await runStatus([], text.ctx, host), 1);
  t.match(text.out(), /no gateway node is installed on this host/);
  const json = captureCli(root);
  t.equal(await runStatus(['--json'], json.ctx, host), 1);
  t.match(JSON.parse(json.out()), { installed: false, installDir: null, service: { state: 'not-installed' } });
  t.same(listTree(root), before, 'status writes nothing');
});

t.test('logs --lines beyond what it takes says the allowed range, not that it is no whole number', async (t) => {
  const { dir, services } = installedHost();
  const host = hostEnv(dir, { services });
  const cli = captureCli(root);
  await t.rejects(runLogs(['node-edge', '--lines', '99999999999'], cli.ctx, host), { name: 'UsageError', message: '--lines must be at most 999999999, got "99999999999"' });
  await t.rejects(runLogs(['node-edge', '--lines', '12x'], cli.ctx, host), { message: '--lines must be a whole number, got "12x"' });
  // A token pasted into the wrong option is not named back.
  await t.rejects(runLogs(['node-edge', '--lines', 'zt_live_0123456789abcdef'], cli.ctx, host), {
    message: '--lines must be a whole number, got a value that is not one (not shown: it does not look like a number)',
  });
  t.equal(await runLogs(['node-edge', '--lines', '999999999'], cli.ctx, host), 0, 'the largest is taken');
  t.same(services.calls, ['journal node-edge.service {"lines":999999999}']);
});

t.test('status --install-dir \'\' (an unset shell variable) is a usage error, exit 2, instead of reading the current dir', async (t) => {
  const host = hostEnv(root);
  await t.rejects(runStatus(['--install-dir', ''], captureCli(root).ctx, host), {
    name: 'UsageError',
    message: /^--install-dir is empty \(an unset shell variable\?\): pass the install dir, or leave --install-dir out/,
  });
  const cli = captureCli(root);
  t.equal(await runCli(['status', '--install-dir', ''], cli.ctx), 2);
  t.match(cli.err(), /--install-dir is empty/);
});

t.test('a token pasted without its --token is refused without being echoed', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'zn-args-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const cli = captureCli(root);
  const secret = 'zn_it_PASTEDsecretWithoutItsFlag0123456789';
  const refused = await runInstall([...BASE, secret], cli.ctx, hostEnv(root, { services: fakeServices(root) })).then(
    (exit) => new Error(`no usage error (exit ${exit})`),
    (err: unknown) => err as Error,
  );
  t.type(refused, UsageError, 'a usage error (exit 2)');
  t.match(refused.message, /unexpected argument: a value not given after an option \(not shown: it may be a token\)/);
  t.notMatch(refused.message + cli.out(), /PASTEDsecret/, 'the token is not shown');
});

t.test('zenova: a mistyped first word gets the command or option it most likely meant, and a token-like word is not quoted back', async (t) => {
  const work = mkdtempSync(join(tmpdir(), 'zn-first-word-'));
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  const option = captureCli(work);
  t.equal(await runCli(['--verison'], option.ctx), 2);
  t.match(option.err(), /unknown option --verison; did you mean --version\?/);
  const command = captureCli(work);
  t.equal(await runCli(['stauts'], command.ctx), 2);
  t.match(command.err(), /unknown command "stauts"; did you mean status\?/);
  const token = 'zn_it_Q2hlY2tUaGVUb2tlbk5ldmVyQXBwZWFycw.x';
  const pasted = captureCli(work);
  t.equal(await runCli([token], pasted.ctx), 2);
  t.match(pasted.err(), /unknown command \(not shown: it does not look like a command name\)/);
  t.notOk(pasted.err().includes(token), 'the token-like word is not printed');
});
