/**
 * `zenova status` of an installed node whose spool.db it cannot read: the spool row says
 * UNREADABLE with the reason and, as `zenova-node status` does, what to run next — doctor, named
 * as the operator runs it on an installed host (zenova-node is not on its PATH: the installed
 * release's launcher with the install's state dir). `--json` keeps the reason as read. Without a
 * release to run it from (a broken `current`), no command is named that is not there. The
 * enrollment and the service manager are stand-ins (fake-host.ts); the spool file is real garbage.
 */
import t from 'tap';
import type { Test } from 'tap';
import { existsSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { runStatus } from '../../installer/src/commands/status.js';
import type { HostEnv } from '../../installer/src/host/host-env.js';
import { captureCli, fakeEnroller, fakeServices, healthyControlPlane, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-status-unreadable-spool-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const pkg = await buildNodePackage(work, keys, { version: '0.4.0' });
const DIR = 'opt/zenova-node';
const DOCTOR = '/opt/zenova-node/current/bin/zenova-node doctor --state-dir /opt/zenova-node/data';

/** An installed, enrolled node whose spool.db is not a database. */
async function nodeWithGarbageSpool(t: Test): Promise<{ root: string; host: HostEnv }> {
  const root = mkdtempSync(join(tmpdir(), 'zn-status-unreadable-spool-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const host = hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: fakeEnroller, probeControlPlane: healthyControlPlane({ version: '0.4.0' }) });
  const cli = captureCli(work);
  const command = ['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', '--token', 'zn_it_unreadable_spool_1'];
  if (!t.equal(await runInstall(command, cli.ctx, host), 0, 'installed')) t.comment(cli.out());
  // A real enrollment writes the credential beside the identity (the stand-in writes none).
  writeFileSync(join(root, DIR, 'data/credential.json'), JSON.stringify({ current: { id: 'cred-1', secret: 'zn_cred_secret', expiresAt: '2099-01-01T00:00:00Z' } }), { mode: 0o600 });
  writeFileSync(join(root, DIR, 'data/spool.db'), 'this is not a database, only garbage that fills a page or more '.repeat(100), { mode: 0o600 });
  return { root, host };
}

async function status(host: HostEnv, ...args: string[]): Promise<{ exit: number; out: string }> {
  const cli = captureCli(work);
  const exit = await runStatus(args, cli.ctx, host);
  return { exit, out: cli.out() };
}

t.test('status of an installed node with an unreadable spool advises the doctor run of the installed release on its state dir; --json keeps the reason as read', async (t) => {
  const { root, host } = await nodeWithGarbageSpool(t);
  const r = await status(host);
  t.equal(r.exit, 0, 'installed and enrolled: exit 0');
  const spoolRows = r.out.match(/^spool:.*$/gm) ?? [];
  t.equal(spoolRows.length, 1, r.out);
  t.match(spoolRows[0], /^spool: +UNREADABLE: .+; run `([^`]+)`$/);
  t.equal(/; run `([^`]+)`$/.exec(spoolRows[0] ?? '')?.[1], DOCTOR, 'the command as run on this host');
  t.ok(existsSync(join(root, DIR, 'current/bin/zenova-node')), 'the launcher it names is there');
  t.notMatch(r.out, /run `zenova-node doctor`/, 'not the bare zenova-node, which is not on the PATH');

  const json = JSON.parse((await status(host, '--json')).out);
  t.match(json.node.spool, { backlog: null, open: null });
  t.type(json.node.spool.error, 'string');
  t.notMatch(json.node.spool.error, /doctor/, 'the reason as read, without the advice');
});

t.test('status of an unreadable spool names the doctor command only while current names a release to run it from', async (t) => {
  const { root, host } = await nodeWithGarbageSpool(t);
  t.match((await status(host)).out, /^spool: +UNREADABLE: .+; run `[^`]+ doctor --state-dir [^`]+`$/m);
  rmSync(join(root, DIR, 'current'));
  symlinkSync('releases/0.3.9', join(root, DIR, 'current'));
  const r = await status(host);
  t.match(r.out, /^version: +BROKEN: /m);
  t.match(r.out, /^spool: +UNREADABLE: /m);
  t.notMatch(r.out, /doctor/, 'the broken link is fixed first: its row says how');
});
