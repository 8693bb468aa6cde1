/**
 * An install dir that is, or is under, a symbolic link whose target does not exist (a volume not
 * mounted yet: /data/zenova-node → /srv/disk1/zn) is refused by the checks with NODE-DIR-DANGLING-LINK
 * naming the link and its missing target, --check-only too, in every mode, and nothing is written or
 * enrolled; before, stat() called it absent, every check passed and the install failed with a bare
 * NODE-WRITE-FAILED … ENOENT (or ENOTDIR). A link to a dir that exists, and a dir not created yet
 * under real dirs, still pass.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInstall } from '../../installer/src/commands/install.js';
import type { Enroller } from '../../installer/src/install/install-node.js';
import { captureCli, fakeEnroller, fakeServices, hostEnv, listTree } from './fake-host.js';
import { buildNodePackage, releaseKeys } from './package-builder.js';

const keys = releaseKeys();
const work = mkdtempSync(join(tmpdir(), 'zn-dangling-work-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const pkgFile = (async () => (await buildNodePackage(work, keys)).file)();
const DIR = '/data/zn';

/** A host root laid out by `setup`, and one install run in it with `extra` options. */
async function run(setup: (root: string) => void, extra: string[]): Promise<{ exit: number; out: string; changed: boolean; enrolled: boolean }> {
  const root = mkdtempSync(join(tmpdir(), 'zn-dangling-root-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'etc/systemd/system'), { recursive: true });
  setup(root);
  const before = listTree(root);
  let enrolled = false;
  const enroll: Enroller = async (opts) => {
    enrolled = true;
    return fakeEnroller(opts);
  };
  const cli = captureCli(work);
  const exit = await runInstall(
    ['node', '--package', await pkgFile, '--control-plane', 'https://cp.example.test', '--install-dir', DIR, ...extra],
    cli.ctx,
    hostEnv(root, { keyPem: keys.publicKeyPem, services: fakeServices(root), enroll }),
  );
  return { exit, out: cli.out(), changed: JSON.stringify(listTree(root)) !== JSON.stringify(before), enrolled };
}

const MODES = [['--check-only'], ['--token', 'zn_it_DANGLINGTOKEN1'], ['--check-only', '--reenroll']];

const CASES: { what: string; setup: (root: string) => void; cause: string }[] = [
  {
    what: 'the install dir itself links to a missing target',
    setup: (root) => {
      mkdirSync(join(root, 'data'));
      symlinkSync('../srv/nowhere', join(root, 'data/zn'));
    },
    cause: `install dir ${DIR} is a symbolic link to /srv/nowhere, which does not exist: mount the volume or fix the link`,
  },
  {
    what: 'a dir above it links to a missing target',
    setup: (root) => symlinkSync('mnt/disk', join(root, 'data')),
    cause: `install dir ${DIR} is under /data, a symbolic link to /mnt/disk, which does not exist: mount the volume or fix the link`,
  },
  {
    what: 'a link it leads to links to a missing target',
    setup: (root) => {
      symlinkSync('/vol', join(root, 'data'));
      mkdirSync(join(root, 'srv'));
      symlinkSync('/srv/disk1', join(root, 'vol'));
    },
    cause: `install dir ${DIR} leads through /vol, a symbolic link to /srv/disk1, which does not exist: mount the volume or fix the link`,
  },
];

for (const c of CASES) {
  t.test(`${c.what}: NODE-DIR-DANGLING-LINK names the link and its target, nothing is written or enrolled`, async (t) => {
    for (const extra of MODES) {
      const what = extra.join(' ');
      const r = await run(c.setup, extra);
      t.equal(r.exit, 1, `${what}: exit 1`);
      t.match(r.out, `✗ NODE-DIR-DANGLING-LINK: ${c.cause}\n`, `${what}: the finding names the link and its missing target`);
      t.match(r.out, '→ Mount the volume the link leads to', `${what}: the advice says to mount it or fix the link`);
      t.notMatch(r.out, /NODE-WRITE-FAILED|NODE-DIR-READ-ONLY|All checks passed/, `${what}: refused by the checks, not by a failed write`);
      t.notOk(r.changed, `${what}: nothing written`);
      t.notOk(r.enrolled, `${what}: the token was not used`);
    }
  });
}

t.test('a link to a dir that exists, and a dir not created yet under real dirs, pass the checks', async (t) => {
  const linked = await run((root) => {
    mkdirSync(join(root, 'data'));
    mkdirSync(join(root, 'srv/disk1'), { recursive: true });
    symlinkSync('/srv/disk1', join(root, 'data/zn'));
  }, ['--check-only']);
  t.equal(linked.exit, 0, linked.out);
  t.match(linked.out, 'All checks passed');
  const fresh = await run((root) => mkdirSync(join(root, 'data')), ['--check-only']);
  t.equal(fresh.exit, 0, fresh.out);
  t.notMatch(fresh.out, /NODE-DIR-DANGLING-LINK/);
});
