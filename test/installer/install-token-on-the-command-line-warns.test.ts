/**
 * A token given with --token was readable by every user of the host in the process list while the
 * installer ran: the install says so with the warning NODE-TOKEN-ARGUMENT (never the token) and
 * names --token-file - for next time; the install goes on and its exit is unchanged. A token read
 * with --token-file gets no such warning.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import { captureCli, fakeEnroller, fakeServices, hostEnv } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-token-arg-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const TOKEN = 'zn_it_VISIBLEINPS1';

async function install(tokenArgs: string[], extra: string[] = []): Promise<{ exit: number; out: string }> {
  const pkg = await buildNodePackage(work, keys);
  const root = mkdtempSync(join(tmpdir(), 'zn-token-arg-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'etc/systemd/system'), { recursive: true });
  const cli = captureCli(work);
  const exit = await runInstall(['node', '--package', pkg.file, '--control-plane', 'https://cp.example.test', ...tokenArgs, ...extra], cli.ctx, hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll: fakeEnroller }));
  return { exit, out: cli.out() + cli.err() };
}

const WARNING = '! NODE-TOKEN-ARGUMENT: the token was given with --token on the command line, where every user of this host could read it in the process list (ps) while the installer ran\n';

t.test('an install with --token warns NODE-TOKEN-ARGUMENT, naming --token-file - for next time, and installs with exit 0', async (t) => {
  const r = await install(['--token', TOKEN]);
  t.equal(r.exit, 0, r.out);
  t.match(r.out, WARNING);
  t.match(r.out, /→ Next time pass the token with --token-file - /);
  t.match(r.out, /is installed and ready/);
  t.notOk(r.out.includes(TOKEN), 'the token is not printed');
});

t.test('a blocked install with --token still warns, and its exit stays 1', async (t) => {
  const r = await install(['--token', TOKEN], ['--install-dir', '/tmp/zenova-node']);
  t.equal(r.exit, 1);
  t.match(r.out, WARNING);
  t.match(r.out, /NODE-DIR-FORBIDDEN/);
});

t.test('an install with --token-file gets no NODE-TOKEN-ARGUMENT', async (t) => {
  const file = join(work, 'node.token');
  writeFileSync(file, `${TOKEN}\n`, { mode: 0o600 });
  const r = await install(['--token-file', file]);
  t.equal(r.exit, 0, r.out);
  t.notMatch(r.out, /NODE-TOKEN-ARGUMENT/);
});
